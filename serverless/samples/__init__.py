"""Small functions for exercising the emulator (tests, the serverless benchmark)."""
