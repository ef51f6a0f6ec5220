"""A small user package for the tests: the code a guard probes.

Each function makes one kind of Warp call the way a user's library would. Tests assert on
these functions' names and modules, so the breaches come from outside the test files.
"""
