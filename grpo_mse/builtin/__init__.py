"""The built-in arithmetic data (the paper's Section 5.1). The built-in policies' builders are studies:
studies/builders/."""
