"""The ``modelplane`` command line."""
