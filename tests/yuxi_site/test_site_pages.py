"""The site's own pages (log in, logged out, locked out) speak the page's language: the one the
page's switch chose, else the browser's; every text of theirs is in the site's catalogue."""

import pytest
from django.conf import settings
from django.test import Client

from tests.catalogues import ROOT, translated_and_compiled
from tests.factories import UserConfigFactory

pytestmark = pytest.mark.django_db


def test_switched_to_chinese_on_the_page_the_login_page_it_sends_to_is_chinese_too():
    client = Client()
    client.force_login(UserConfigFactory().user)
    client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/"})
    logged_out = client.post("/accounts/logout/").content.decode()
    assert '<html lang="zh-hans">' in logged_out and "已退出登录" in logged_out
    response = client.get("/", HTTP_ACCEPT_LANGUAGE="en", follow=True)
    assert response.redirect_chain[-1][0].startswith("/accounts/login/?next=/")
    html = response.content.decode()
    assert '<html lang="zh-hans">' in html
    assert "<title>登录 · Yuxi 记忆</title>" in html and "<h1>登录</h1>" in html
    assert "登录后你会进入自己的页面：你的对话和你的记忆。" in html
    assert "/api/docs" not in html  # the end user's login page does not advertise the API
    assert "Log in" not in html


@pytest.mark.parametrize(
    ("accept", "lang", "heading"),
    [("en-US,en;q=0.9", "en", "<h1>Log in</h1>"), ("zh-CN,zh;q=0.9", "zh-hans", "<h1>登录</h1>")],
)
def test_without_a_choice_the_login_page_follows_the_browser(accept, lang, heading):
    html = Client().get("/accounts/login/", HTTP_ACCEPT_LANGUAGE=accept).content.decode()
    assert f'<html lang="{lang}">' in html and heading in html


def test_a_failed_login_and_the_lockout_are_said_in_chinese():
    user = UserConfigFactory().user
    client = Client(HTTP_ACCEPT_LANGUAGE="zh-CN")
    wrong = {"username": user.username, "password": "wrong"}
    failed = client.post("/accounts/login/", wrong).content.decode()
    assert "用户名和密码不匹配，请重试。" in failed
    for _ in range(settings.LOGIN_FAILURE_LIMIT - 1):
        locked = client.post("/accounts/login/", wrong)
    assert locked.status_code == 429
    html = locked.content.decode()
    assert "<h1>登录失败次数过多</h1>" in html
    assert "连续登录失败了 5 次" in html and "最多 15 分钟后再试。" in html


def test_every_text_of_the_site_pages_is_translated_and_the_compiled_catalogue_is_current():
    entries = translated_and_compiled(ROOT / "yuxi_site/locale/zh_Hans/LC_MESSAGES")
    assert {"Log in", "Logged out", "Too many failed logins"} <= set(entries)


def test_the_login_page_says_why_after_a_session_ended():
    english = Client().get("/accounts/login/?next=/&session=ended").content.decode()
    assert "Your session ended" in english
    assert "Your session ended" not in Client().get("/accounts/login/?next=/").content.decode()
    chinese = Client().get("/accounts/login/?next=/&session=ended", HTTP_ACCEPT_LANGUAGE="zh-CN")
    assert "你的登录已结束" in chinese.content.decode()


def test_the_lockout_says_when_to_retry_in_seconds():
    user = UserConfigFactory().user
    client = Client()
    for _ in range(settings.LOGIN_FAILURE_LIMIT):
        locked = client.post("/accounts/login/", {"username": user.username, "password": "no"})
    assert locked.status_code == 429
    assert 0 < int(locked["Retry-After"]) <= settings.LOGIN_LOCKOUT_SECONDS


def test_the_favicon_is_served():
    assert Client().head("/favicon.ico").status_code == 200
    response = Client().get("/favicon.ico")
    assert response.status_code == 200
    assert response["Content-Type"] == "image/x-icon"
    assert b"".join(response.streaming_content if response.streaming else [response.content])[
        :4
    ] == (b"\x00\x00\x01\x00")
