"""Subcommands of the ``roofline`` command line (see :mod:`roofline.cli`)."""
