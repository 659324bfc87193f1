"""Settings for the Yuxi Memory site, read from the environment (and an optional `.env`)."""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env")

SECRET_KEY = env.str("SECRET_KEY", default="insecure-dev-key-change-me")
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "conversations",
    "memory_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "yuxi_site.urls"

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
            ],
        },
    },
]

WSGI_APPLICATION = "yuxi_site.wsgi.application"

# PostgreSQL only: advisory locks and row locks are the point, so there is no SQLite fallback.
DATABASES = {
    "default": env.db_url("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/yuxi_memory"),
}
# Django's psycopg pool: a chat holds a connection only while it talks to the database (never
# while the model thinks), so concurrent chats are bounded by this pool, not by PostgreSQL's
# max_connections. A caller waits up to `timeout` seconds for a free connection.
DATABASES["default"]["OPTIONS"] = {
    **DATABASES["default"].get("OPTIONS", {}),
    "pool": {
        "min_size": 1,
        "max_size": 16,
        "timeout": 10.0,
        # Idle connections above min_size are closed after this many seconds.
        "max_idle": 60.0,
    },
}
if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
    raise environ.ImproperlyConfigured(
        "DATABASE_URL must point at PostgreSQL (postgres://...): memory writes need its "
        "advisory and row locks."
    )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"

# Per-user workspaces live at <WORKSPACE_ROOT>/<uid>/; the root itself is trusted.
WORKSPACE_ROOT = env.path("WORKSPACE_ROOT", default=str(BASE_DIR / "var" / "workspaces"))

# How long a worker's claim on an AgentRun lasts before it must renew it.
AGENT_RUN_LEASE_SECONDS = env.int("AGENT_RUN_LEASE_SECONDS", default=60)

# Upper bound on waiting for the per-user memory advisory lock.
MEMORY_LOCK_TIMEOUT_MS = env.int("MEMORY_LOCK_TIMEOUT_MS", default=5000)

# The chat model: an OpenAI-compatible chat-completions endpoint when LLM_BASE_URL is set,
# otherwise the deterministic scripted model (tests, demo).
LLM_BASE_URL = env.str("LLM_BASE_URL", default="")
LLM_API_KEY = env.str("LLM_API_KEY", default="")
LLM_MODEL = env.str("LLM_MODEL", default="gpt-4o-mini")
LLM_TIMEOUT_SECONDS = env.float("LLM_TIMEOUT_SECONDS", default=60.0)
# Retries of a failed model request (ChatOpenAI's max_retries), all within the timeout above.
LLM_MAX_RETRIES = env.int("LLM_MAX_RETRIES", default=1)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="WARNING")},
}
