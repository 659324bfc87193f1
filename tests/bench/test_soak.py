"""The fault harness listens on the ports its options name (fixed defaults, never random), so
runs on a shared machine or CI can each be given their own, and a taken port is named."""

import socket
from pathlib import Path

import pytest
import soak


def test_the_ports_come_from_options_with_fixed_defaults():
    defaults = soak.parse_args([])
    assert (defaults.postgres_port, defaults.site_port) == (soak.POSTGRES_PORT, soak.SITE_PORT)
    chosen = soak.parse_args(["--small", "--postgres-port", "8391", "--site-port", "8392"])
    assert (chosen.postgres_port, chosen.site_port) == (8391, 8392)


def test_the_cluster_and_the_site_use_the_ports_they_are_given(tmp_path: Path):
    assert soak.Cluster(tmp_path, 8391).port == 8391
    site = soak.Site(tmp_path, {}, soak.SMALL, 8392)
    assert site.port == 8392 and site.env["PORT"] == "8392"


def test_a_taken_port_stops_the_harness_naming_the_options():
    with socket.socket() as taken:
        taken.bind((soak.LOOPBACK, 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit, match="--postgres-port and --site-port"):
            soak._require_free(port)
