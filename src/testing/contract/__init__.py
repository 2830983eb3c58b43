"""Public contract suites: any repository or dispatcher, ours or a third party's, runs them by supplying a fixture."""
