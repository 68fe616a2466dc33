"""Testing support for hosts: cassettes, a loopback model server, in-memory traces."""
