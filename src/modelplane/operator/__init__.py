"""The operator: reconciles each ServingStack onto its target cluster."""
