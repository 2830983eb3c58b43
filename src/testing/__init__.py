"""Test kit: public contract suites and fakes for downstream projects."""
