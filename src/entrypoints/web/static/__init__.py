"""The dashboard's stylesheet and its one script, served under /static (package data; a package only so that setuptools ships them without a warning)."""
