"""The modelplane.ai API as code: names, generated models, enums, the XRDs'
rules, the serving-modes table, the shared cluster record and what a member
costs. Imports nothing at package level, so hack/gen_xrds.py can import the
serving table without the function's dependencies."""
