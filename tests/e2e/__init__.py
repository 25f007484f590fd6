"""Browser tests of the demo page (headless Debian chromium driven by Playwright)."""
