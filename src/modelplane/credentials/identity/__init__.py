"""Cloud identities: credentials a ServingStack's ``spec.secrets`` names instead of
the kubeconfig's own, minted into short-lived bearer tokens for the target."""
