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


@pytest.fixture(scope="module")
def tabs_url(embedder, nudged_tiny):
    """`zh-bert demo EMBEDDER MLM`: the cloze tab and the similarity tab on one page."""
    from _demo_helpers import served

    with served([nudged_tiny, embedder]) as url:
        yield url


def test_similarity_tab_in_the_browser(browser, tabs_url, output_dir):
    """An embedder beside a masked LM: a second tab compares two sentences (their cosine) and ranks a few lines
    against a query (the identical line first, at cosine 1); an empty query is a message, not a trace."""
    page = browser.new_page(viewport={"width": 1100, "height": 1000})
    page.goto(tabs_url, wait_until="networkidle")
    page.get_by_role("tab", name="相似度 Similarity").click()
    page.locator("#zh-sim-a textarea").fill("今天天气很好")
    page.locator("#zh-sim-b textarea").fill("今天天气很好")
    page.locator("#zh-sim-go").click()
    result = page.locator("#zh-sim-result .zh-filled")
    result.wait_for(timeout=30_000)
    assert result.inner_text() == "cosine 1.0000"
    page.locator("#zh-search-query textarea").fill("去哪里申请护照")
    page.locator("#zh-search-lines textarea").fill("今天的天气怎么样\n去哪里申请护照\n办理签证需要哪些材料")
    page.locator("#zh-search-go").click()
    hits = page.locator("#zh-search-result .zh-cand")
    hits.nth(2).wait_for(timeout=30_000)
    assert hits.count() == 3 and hits.nth(0).inner_text().startswith("1.0000") and "去哪里申请护照" in hits.nth(0).inner_text()
    page.screenshot(path=str(output_dir / "demo_similarity.png"), full_page=True)
    page.locator("#zh-search-query textarea").fill("   ")
    page.locator("#zh-search-go").click()
    msg = page.locator("#zh-search-result .zh-msg")
    msg.wait_for(timeout=30_000)
    assert "query: empty" in msg.inner_text() and "Traceback" not in page.content()
    page.get_by_role("tab", name="填空 Cloze").click()
    assert page.locator("#zh-fill").is_visible()
    page.close()
