"""pinpoint: localization."""
