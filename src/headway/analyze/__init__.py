"""``headway analyze``: replay recorded agent runs through a Governor in shadow mode and
report what it would have served, corrected and stopped."""
