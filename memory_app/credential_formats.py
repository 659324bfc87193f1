"""The detect-secrets format plugins the credential detector calls, by the kind they find, and
the token formats detect-secrets 1.5 has no plugin for, written as detect-secrets plugins.

Only regular-expression plugins of known formats: not detect-secrets' keyword or entropy
plugins (the detector's own rules replace them, bound to credential words), nor the public-IP
one (an address is no credential). Each added format is a `RegexBasedDetector`
(detect-secrets' own base: a `secret_type` and a `denylist` of compiled patterns), so the
credential detector calls them exactly as it calls detect-secrets' plugins. The patterns
follow gitleaks' maintained rule set (its rule ids are named beside each one); where gitleaks
pins an exact length, the length is a lower bound here, since a provider lengthening its keys
must not let them through:

- GitHub fine-grained personal access tokens, `github_pat_` (gitleaks `github-fine-grained-pat`;
  detect-secrets knows only `ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_`);
- Slack app-level and configuration tokens, `xapp-` and `xoxe` (gitleaks `slack-app-token`,
  `slack-config-access-token`, `slack-config-refresh-token`; detect-secrets knows `xox[baprs]-`
  and webhooks);
- Stripe test and restricted keys, `sk_test_`, `rk_test_`, `*_prod_` (gitleaks
  `stripe-access-token`; detect-secrets knows only `sk_live_`/`rk_live_`);
- Google API keys, `AIza` (gitleaks `gcp-api-key`);
- OpenAI project, service-account and admin keys, `sk-proj-`, `sk-svcacct-`, `sk-admin-`
  (gitleaks `openai-api-key` also wants its `T3BlbkFJ` marker; the prefix alone is OpenAI's);
- Anthropic API and admin keys, `sk-ant-api03-`, `sk-ant-admin01-` (gitleaks
  `anthropic-api-key`, `anthropic-admin-api-key`).

A leaf: it imports nothing of the app.
"""

import re

from detect_secrets.plugins.artifactory import ArtifactoryDetector
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.cloudant import CloudantDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.ibm_cloud_iam import IbmCloudIamDetector
from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.softlayer import SoftlayerDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector


class GitHubFineGrainedTokenDetector(RegexBasedDetector):
    """GitHub fine-grained personal access tokens."""

    secret_type = "GitHub fine-grained token"
    denylist = (re.compile(r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{82,}"),)


class SlackAppTokenDetector(RegexBasedDetector):
    """Slack app-level tokens and app configuration tokens."""

    secret_type = "Slack app or configuration token"
    denylist = (
        re.compile(r"(?<![A-Za-z0-9])xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+", re.IGNORECASE),
        re.compile(r"(?<![A-Za-z0-9])xoxe(?:\.xox[bp])?-\d-[A-Z0-9]{140,}", re.IGNORECASE),
    )


class StripeKeyDetector(RegexBasedDetector):
    """Stripe secret and restricted keys of every mode (detect-secrets: live ones only)."""

    secret_type = "Stripe key"
    denylist = (re.compile(r"(?<![A-Za-z0-9])(?:sk|rk)_(?:test|live|prod)_[A-Za-z0-9]{10,}"),)


class GoogleApiKeyDetector(RegexBasedDetector):
    """Google Cloud / Maps / Firebase API keys."""

    secret_type = "Google API key"
    denylist = (re.compile(r"(?<![A-Za-z0-9])AIza[A-Za-z0-9_\-]{35}(?![A-Za-z0-9_\-])"),)


class OpenAIProjectKeyDetector(RegexBasedDetector):
    """OpenAI project, service-account and admin keys (detect-secrets: the older `sk-` keys)."""

    secret_type = "OpenAI key"
    denylist = (re.compile(r"(?<![A-Za-z0-9])sk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{40,}"),)


class AnthropicKeyDetector(RegexBasedDetector):
    """Anthropic API and admin keys."""

    secret_type = "Anthropic key"
    denylist = (re.compile(r"(?<![A-Za-z0-9])sk-ant-(?:api|admin)\d{2}-[A-Za-z0-9_\-]{80,}"),)


# Every format plugin, by the kind the detector files its finds under.
PRIVATE_KEY_PLUGINS: tuple[type[RegexBasedDetector], ...] = (PrivateKeyDetector,)
API_KEY_PLUGINS: tuple[type[RegexBasedDetector], ...] = (
    AWSKeyDetector,
    ArtifactoryDetector,
    AzureStorageKeyDetector,
    CloudantDetector,
    IbmCloudIamDetector,
    IbmCosHmacDetector,
    MailchimpDetector,
    OpenAIDetector,
    SendGridDetector,
    SoftlayerDetector,
    SquareOAuthDetector,
    StripeDetector,
    TwilioKeyDetector,
    StripeKeyDetector,
    GoogleApiKeyDetector,
    OpenAIProjectKeyDetector,
    AnthropicKeyDetector,
)
ACCESS_TOKEN_PLUGINS: tuple[type[RegexBasedDetector], ...] = (
    DiscordBotTokenDetector,
    GitHubTokenDetector,
    GitLabTokenDetector,
    JwtTokenDetector,
    NpmDetector,
    PypiTokenDetector,
    SlackDetector,
    TelegramBotTokenDetector,
    GitHubFineGrainedTokenDetector,
    SlackAppTokenDetector,
)
PASSWORD_PLUGINS: tuple[type[RegexBasedDetector], ...] = (BasicAuthDetector,)
