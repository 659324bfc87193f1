"""The memory preview on a user's config page: the agent's own bounded, no-follow read."""

import os
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

from memory_app.selectors import MEMORY_PROMPT_MAX_BYTES
from tests.factories import UserConfigFactory

pytestmark = pytest.mark.django_db

MARKER = "<script>alert('memory')</script>"


def _agents_dir(uid: int) -> Path:
    return Path(settings.WORKSPACE_ROOT) / str(uid) / "agents"


def _write_memory(uid: int, data: bytes) -> Path:
    agents = _agents_dir(uid)
    agents.mkdir(parents=True, exist_ok=True)
    path = agents / "MEMORY.md"
    path.write_bytes(data)
    return path


def _page(client, config) -> str:
    response = client.get(reverse("admin:memory_app_userconfig_change", args=[config.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_preview_shows_memory_escaped_with_its_size(staff_client):
    config = UserConfigFactory(enable_memory=True)
    text = f"- 对花生过敏 🥜\n- {MARKER}\n"
    _write_memory(config.user_id, text.encode())
    html = _page(staff_client, config)
    assert "&lt;script&gt;alert(&#x27;memory&#x27;)&lt;/script&gt;" in html
    assert "<script>alert" not in html
    assert "对花生过敏 🥜" in html
    assert (
        f"{len(text.encode())} bytes shown (the agent reads at most 24576); truncated: no" in html
    )
    assert "on: the agent&#x27;s next run reads the memory" in html


def test_preview_says_when_the_switch_is_off(staff_client):
    config = UserConfigFactory(enable_memory=False)
    _write_memory(config.user_id, b"- a fact\n")
    html = _page(staff_client, config)
    assert "off: the agent reads no memory and gets no memory tool" in html
    assert "- a fact" in html


def test_huge_memory_is_previewed_as_its_first_24_kib_only(staff_client):
    config = UserConfigFactory()
    _write_memory(config.user_id, "记".encode() * (4 * 1024 * 1024))  # 12 MiB
    response = staff_client.get(reverse("admin:memory_app_userconfig_change", args=[config.pk]))
    html = response.content.decode()
    kept = MEMORY_PROMPT_MAX_BYTES // 3 * 3
    assert f"{kept} bytes shown (the agent reads at most 24576); truncated: yes" in html
    assert html.count("记") == kept // 3
    assert len(response.content) < 100_000


def test_symlinked_memory_is_refused_and_its_target_never_shown(staff_client, tmp_path):
    config = UserConfigFactory()
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-TARGET")
    _agents_dir(config.user_id).mkdir(parents=True)
    (_agents_dir(config.user_id) / "MEMORY.md").symlink_to(secret)
    html = _page(staff_client, config)
    assert "Refused: MEMORY.md or a directory above it is a symlink" in html
    assert "TOP-SECRET-TARGET" not in html
    assert str(tmp_path) not in html


def test_symlinked_agents_directory_is_refused(staff_client, tmp_path):
    config = UserConfigFactory()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "MEMORY.md").write_text("FROM-ELSEWHERE")
    user_dir = Path(settings.WORKSPACE_ROOT) / str(config.user_id)
    user_dir.mkdir(parents=True)
    (user_dir / "agents").symlink_to(elsewhere, target_is_directory=True)
    html = _page(staff_client, config)
    assert "Refused" in html
    assert "FROM-ELSEWHERE" not in html


def test_fifo_in_place_of_memory_is_refused_without_hanging(staff_client):
    config = UserConfigFactory()
    _agents_dir(config.user_id).mkdir(parents=True)
    os.mkfifo(_agents_dir(config.user_id) / "MEMORY.md")
    assert "Refused" in _page(staff_client, config)


def test_missing_memory_is_reported_and_nothing_is_created(staff_client):
    config = UserConfigFactory()
    html = _page(staff_client, config)
    assert "MEMORY.md is missing, empty or blank: the agent gets no memory block." in html
    assert not (Path(settings.WORKSPACE_ROOT) / str(config.user_id)).exists()


def test_a_blank_memory_file_previews_as_the_agent_sees_it_no_block(staff_client):
    config = UserConfigFactory()
    _write_memory(config.user_id, b" \n\t\n")
    html = _page(staff_client, config)
    assert "MEMORY.md is missing, empty or blank: the agent gets no memory block." in html


def test_preview_never_writes_the_file(staff_client):
    config = UserConfigFactory()
    path = _write_memory(config.user_id, b"- keep me\n")
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    before = (path.read_bytes(), path.stat().st_mtime_ns, sorted(os.listdir(path.parent)))
    _page(staff_client, config)
    assert (path.read_bytes(), path.stat().st_mtime_ns, sorted(os.listdir(path.parent))) == before
