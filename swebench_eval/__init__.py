"""pinpoint: swebench_eval."""
