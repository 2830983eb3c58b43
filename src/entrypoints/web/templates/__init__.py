"""The dashboard's Jinja2 templates (package data; a package only so that setuptools ships them without a warning)."""
