"""pinpoint: environments."""
