"""mkdocs hook: lengen's docstrings use Sphinx roles (:func:`x`, :mod:`x`); mkdocstrings renders
them as ':func:' followed by a code span. Drop the role so the page shows the code span alone."""
import re

ROLE = re.compile(r":(?:func|mod|class|meth|attr|data|obj|exc|ref|const):(?=<code>)")


def on_page_content(html, **kwargs):
    return ROLE.sub("", html)
