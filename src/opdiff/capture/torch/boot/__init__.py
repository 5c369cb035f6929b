"""The directory `opdiff run` puts first on PYTHONPATH: its sitecustomize starts capture in every Python process."""
