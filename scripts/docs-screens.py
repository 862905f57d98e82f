"""The screens of the docs site in docs/site-screens/: after `make docs`, run
`.venv/bin/python scripts/docs-screens.py [site]` (Debian's Chromium, through Playwright;
pages loaded from the file system, nothing fetched).

Each page at a desktop's width (1280 px) and a phone's (390 px), the top of the page as
a reader first sees it."""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

PAGES = {"home": "index.html", "redis": "redis.html", "console": "console.html"}
SIZES = {1280: 800, 390: 844}  # width: height, in CSS pixels
OUT = Path(__file__).resolve().parent.parent / "docs" / "site-screens"


def main(site: Path) -> None:
    OUT.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        for width, height in SIZES.items():
            page = browser.new_page(viewport={"width": width, "height": height})
            for name, html in PAGES.items():
                page.goto((site / html).resolve().as_uri())
                page.wait_for_load_state("load")
                page.screenshot(path=OUT / f"{name}-{width}.png")
            page.close()
        browser.close()
    print(f"docs-screens: {len(PAGES) * len(SIZES)} screens in {OUT}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "site"))
