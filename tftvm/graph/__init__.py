"""Graph integration: freeze -> mark -> cluster -> convert -> rewrite (in progress)."""
