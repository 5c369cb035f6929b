"""Debian's chromium driven by Playwright, for the HTML report's browser tests (.ci/install-browser installs
it; Playwright's own browser download is never used). Importing this skips the importing module when either
is missing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = os.environ.get("OPDIFF_CHROMIUM", "/usr/bin/chromium")
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} missing (run .ci/install-browser)", allow_module_level=True)

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
