"""The `opdiff` command line: thin wrappers over the library."""
