"""pinpoint's research lab: what measures and trains the product, kept out of it (the product never imports it)."""
