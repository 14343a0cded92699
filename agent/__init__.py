"""pinpoint: agent."""
