"""The team's settings: `startproject`'s, the guide's block, and the team's own parts (its
accounts app after the apps, its user model, bearer tokens for the memory API)."""

import tempfile
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = "team-host-test-key-not-secret-but-long-enough-for-django-checks-0123456789"
DEBUG = True
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # the guide's line
    "ninja",
    "conversations",
    "memory_app",
    # the team's own, listed after the apps
    "accounts",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # the guide's "what stays your project's job": the memory API's JSON edge
    "memory_app.api_edge.ApiEdgeMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # the page's languages (what the guide recommends); no set_language or logout route
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "team_urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
USE_TZ = True
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_USER_MODEL = "accounts.EmailUser"
# The team's users log in on the admin's login page.
LOGIN_URL = "admin:login"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

_database = environ.Env().db_url(
    "DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/yuxi_memory"
)
_database["NAME"] = f"{_database['NAME']}_team"
DATABASES = {"default": _database}

# Each test sets its own (host_checks.py's fixture); nothing is created here.
WORKSPACE_ROOT = Path(tempfile.gettempdir()) / "yuxi-team-host-workspaces"
# The team's bearer tokens for the memory API (the guide's example), before the session.
MEMORY_API_AUTH = ["api_auth.BearerTokenAuth"]
