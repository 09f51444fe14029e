"""The JSON copies of YAML documents: the same document back, a copy per text (an edit
misses it), nothing copied that JSON would change, and no failure when the cache cannot
be used."""

from __future__ import annotations

import hashlib
import json
import os
from importlib import resources

import pytest
import yaml

from energylens.yamlfile import CACHE_ENV, CACHE_MIN_CHARS, safe_load


def _text(extra: str = "") -> str:
    body = "\n".join(f"key_{i}: {{value: {i * 0.25}, note: 'row {i}'}}" for i in range(200))
    text = f"{body}\n{extra}"
    assert len(text) >= CACHE_MIN_CHARS
    return text


def _copy_of(folder, text: str):
    return folder / f"{hashlib.sha256(text.encode()).hexdigest()}.json"


def test_the_shipped_calibration_reads_back_the_same_from_its_copy(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    text = resources.files("energylens.data").joinpath("calibration.yaml").read_text("utf-8")
    first = safe_load(text)
    assert _copy_of(tmp_path, text).is_file()
    assert safe_load(text) == first == yaml.safe_load(text)


def test_a_copy_is_read_for_the_same_text_and_missed_after_an_edit(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    text = _text()
    assert safe_load(text)["key_3"] == {"value": 0.75, "note": "row 3"}
    _copy_of(tmp_path, text).write_text(json.dumps({"read": "from the copy"}))
    assert safe_load(text) == {"read": "from the copy"}
    edited = _text("key_3b: 1")
    assert safe_load(edited)["key_3b"] == 1


def test_documents_json_would_change_are_not_copied(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    for extra in ("7: integer key", "when: 2026-12-02", "x: .nan"):
        text = _text(extra)
        document = safe_load(text)
        assert document == yaml.safe_load(text) or extra.startswith("x")  # NaN != NaN
        assert not _copy_of(tmp_path, text).exists()
        assert safe_load(text).keys() == document.keys()


def test_no_cache_when_switched_off_or_unwritable(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(CACHE_ENV, "")
    assert safe_load(_text())["key_1"]["value"] == 0.25
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv(CACHE_ENV, str(blocked / "cache"))
    assert safe_load(_text())["key_2"]["value"] == 0.5
    assert list(tmp_path.iterdir()) == [blocked]


def test_the_cache_keeps_only_the_newest_copies(tmp_path, monkeypatch) -> None:
    import energylens.yamlfile as yamlfile

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(yamlfile, "CACHE_MAX_FILES", 3)
    texts = [_text(f"copy: {i}") for i in range(5)]
    for age, text in enumerate(texts):  # distinct times, whatever the file system's clock
        safe_load(text)
        os.utime(_copy_of(tmp_path, text), (1_000_000 + age, 1_000_000 + age))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        _copy_of(tmp_path, t).name for t in texts[-3:])


def test_a_key_given_twice_is_refused_and_a_merge_key_is_not() -> None:
    """YAML keys are unique; PyYAML keeps the last of two silently (a GPU file's second
    ``specs:`` would replace its first). A ``<<`` merge is no repeated key."""
    with pytest.raises(yaml.YAMLError, match="key 'a' given twice"):
        safe_load("a: 1\nb: {c: 2}\na: 3\n")
    with pytest.raises(yaml.YAMLError, match="key 'c' given twice"):
        safe_load("b: {c: 2, c: 3}\n")
    assert safe_load("x: &x {p: 1}\ny: {<<: *x, q: 2}\n") == {"x": {"p": 1}, "y": {"p": 1, "q": 2}}
