"""schemathesis, a client nobody here wrote, against the OpenAPI document: every operation as a
logged-in user with CSRF, bounded examples; no 500 and every response as documented."""

import pytest
import schemathesis
from django.conf import settings
from django.core.wsgi import get_wsgi_application
from django.test import Client
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.factories import ConversationFactory, UserConfigFactory

CSRF_TOKEN = "b" * 32


@pytest.fixture
def api_schema(transactional_db):
    # The document is read as a logged-in user: it is not served to anonymous visitors.
    client = Client()
    client.force_login(UserConfigFactory().user)
    loaded = schemathesis.openapi.from_dict(client.get("/api/openapi.json").json())
    loaded.app = get_wsgi_application()
    return loaded


@pytest.fixture
def session(transactional_db) -> dict[str, dict[str, str]]:
    """Cookies and CSRF header of a logged-in user with memory on and a thread of their own."""
    user = UserConfigFactory().user
    ConversationFactory(user=user)
    client = Client()
    client.force_login(user)
    return {
        "cookies": {
            settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value,
            settings.CSRF_COOKIE_NAME: CSRF_TOKEN,
        },
        "headers": {"X-CSRFToken": CSRF_TOKEN},
    }


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@hypothesis_settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_operation_answers_as_its_openapi_document_says(case, session):
    response = case.call(**session)
    case.validate_response(
        response,
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
    )
