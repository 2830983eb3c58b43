"""An example application that uses Tether: placing an order queues a confirmation e-mail."""
