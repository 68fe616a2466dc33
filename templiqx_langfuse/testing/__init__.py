"""Testing support for hosts: cassettes, replaying runtimes, the pytest plugin."""
