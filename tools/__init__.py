"""pinpoint: tools."""
