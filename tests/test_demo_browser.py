"""The demo page in a real headless Chromium (Playwright): type a sentence, submit, see ranked candidates;
a blank-less sentence shows the friendly message. Screenshots go to tests/output/ (a CI artifact)."""

from __future__ import annotations

import pytest


pytestmark = [pytest.mark.slow, pytest.mark.browser]


def test_fill_in_the_browser(browser, demo_url, output_dir):
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    page.goto(demo_url, wait_until="networkidle")
    box = page.locator("#zh-text textarea")
    box.fill("北京是中国的[MASK]都。")
    page.locator("#zh-fill").click()
    cands = page.locator("#zh-result .zh-cand")
    cands.nth(4).wait_for(timeout=30_000)
    assert cands.count() == 5
    first = cands.nth(0).inner_text()
    assert first.startswith("首") and "%" in first
    assert page.locator("#zh-result .zh-filled").inner_text() == "北京是中国的首都。"
    page.screenshot(path=str(output_dir / "demo.png"), full_page=True)

    box.fill("北京是中国的首都。")
    page.locator("#zh-fill").click()
    msg = page.locator("#zh-result .zh-msg")
    msg.wait_for(timeout=30_000)
    assert "No blank found" in msg.inner_text() and "没有找到空格" in msg.inner_text()
    assert page.locator("#zh-result .zh-cand").count() == 0
    assert "Traceback" not in page.content()
    page.screenshot(path=str(output_dir / "demo_no_blank.png"), full_page=True)
    page.close()
