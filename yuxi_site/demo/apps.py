"""The demo app's configuration (label `yuxi_demo`)."""

from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "yuxi_site.demo"
    label = "yuxi_demo"
    verbose_name = "Demo data"
