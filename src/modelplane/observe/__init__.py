"""What a target serves and holds, read into the plan's Observed."""
