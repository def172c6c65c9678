"""h2's settings kept in lists (kube/h2_settings.py): smaller, and h2 still reads them right."""

from __future__ import annotations

import collections
import sys

import h2.settings
from h2.settings import SettingCodes

from modelplane.kube.h2_settings import compact


def test_compact_keeps_every_value_in_a_list() -> None:
    settings = h2.settings.Settings(client=True)
    before = sum(sys.getsizeof(v) for v in settings._settings.values())
    compact(settings)
    held = settings._settings.values()
    assert not any(isinstance(v, collections.deque) for v in held)
    assert sum(sys.getsizeof(v) for v in held) * 5 < before
    assert settings.initial_window_size == 65535


def test_a_compacted_setting_changes_as_h2_changes_it() -> None:
    # A value sent is pending until acknowledged, then in force.
    settings = h2.settings.Settings(client=True)
    compact(settings)
    settings[SettingCodes.HEADER_TABLE_SIZE] = 0
    assert settings.header_table_size == 4096
    changed = settings.acknowledge()
    assert settings.header_table_size == 0
    change = changed[SettingCodes.HEADER_TABLE_SIZE]
    assert (change.original_value, change.new_value) == (4096, 0)


def test_a_setting_h2_adds_later_is_compacted_again() -> None:
    # h2 makes a deque for a setting it has not seen: compacting again takes it.
    settings = h2.settings.Settings(client=False)
    compact(settings)
    settings[SettingCodes.MAX_CONCURRENT_STREAMS] = 250
    settings.acknowledge()
    compact(settings)
    assert not any(isinstance(v, collections.deque) for v in settings._settings.values())
    assert settings.max_concurrent_streams == 250
