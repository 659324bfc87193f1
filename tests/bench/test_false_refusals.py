"""The labelled set of ordinary facts and the false refusals the credential detector makes on
it (no database: the detector is a leaf)."""

import json

import false_refusals
import make_fact_set


def test_the_set_holds_1000_ordinary_facts_of_every_category_in_both_languages():
    facts = false_refusals.load_facts()
    assert len(facts) >= 1000
    assert len({fact["id"] for fact in facts}) == len(facts)
    groups = {(fact["category"], fact["language"]) for fact in facts}
    categories = {category for category, _ in groups}
    assert {
        "date",
        "address",
        "phone",
        "order",
        "tracking",
        "version",
        "hash",
        "password_word",
        "amount_card",
        "postal_pin",
        "spelled_number",
    } <= categories
    assert groups == {(category, language) for category in categories for language in ("en", "zh")}


def test_the_shipped_set_is_what_the_generator_writes():
    shipped = json.loads(false_refusals.FACT_SET.read_text(encoding="utf-8"))
    assert shipped == make_fact_set.build()


def test_false_refusals_stay_within_one_percent(capsys):
    facts = false_refusals.load_facts()
    assert len(false_refusals.refused(facts)) <= false_refusals.MAX_FALSE_REFUSAL_RATE * len(facts)
    assert false_refusals.main([]) == 0
    assert "false refusals" in capsys.readouterr().out


def test_a_credential_in_the_set_would_be_counted(tmp_path):
    facts = [{"id": "x", "language": "en", "category": "order", "text": "my PIN is 4821"}]
    assert [kinds for _, kinds in false_refusals.refused(facts)] == [["password"]]


def test_the_detector_finds_the_credential_of_every_secret_case():
    cases, missed = false_refusals.missed_secrets()
    assert cases >= 25 and missed == []
