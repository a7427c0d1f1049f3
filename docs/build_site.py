"""`bin/bazel run //docs:site -- --output_dir=DIR`: the manual (docs/*.md) as an HTML site.

MkDocs with the Material theme (docs/config/mkdocs.yml says why): offline, in strict mode, so a
broken link or anchor, or a page missing from the navigation, fails the build with MkDocs's
own message. A relative --output_dir is taken from the directory the command was typed in.
"""

import argparse
import logging
import os
import sys

from common import cli

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "config", "mkdocs.yml")


class SiteError(cli.UserError):
    """The site did not build; the message holds MkDocs's warnings and errors."""


class _Collect(logging.Handler):
    """Keeps MkDocs's warnings and errors, to name them when strict mode aborts."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        """Keeps the record as one line: its level and message."""
        self.lines.append(f"{record.levelname}: {record.getMessage()}")


def build_site(output_dir, config_file=CONFIG):
    """Builds the site of `config_file` into `output_dir` (created; an absolute path), strictly.
    Returns the paths of the HTML pages of its navigation, relative to `output_dir`. Raises
    SiteError with MkDocs's messages when the build fails or warns."""
    # Imported here: the module's help and errors need no MkDocs.
    from mkdocs import exceptions  # pylint: disable=import-outside-toplevel
    from mkdocs.commands import build  # pylint: disable=import-outside-toplevel
    from mkdocs.config import load_config  # pylint: disable=import-outside-toplevel

    collect = _Collect()
    logger = logging.getLogger("mkdocs")
    logger.addHandler(collect)
    try:
        config = load_config(config_file=config_file, site_dir=output_dir, strict=True)
        build.build(config)
    except (exceptions.MkDocsException, OSError) as error:
        raise SiteError("the site did not build (strict mode): " + "; ".join(
            collect.lines + [str(error)])) from error
    finally:
        logger.removeHandler(collect)
    return nav_pages(config.nav)


def nav_pages(nav):
    """The HTML files of the pages of `nav` (the config's list of {title: page.md or [entries]}
    entries, or plain page.md strings), in the order of the navigation."""
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        if isinstance(value, list):
            pages.extend(nav_pages(value))
        else:
            pages.append(os.path.splitext(value)[0] + ".html")
    return pages


def main(argv):
    """Parses --output_dir and builds the site there; errors are one line, exit status 1."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--output_dir", required=True,
                        help="Where the HTML site goes (created; relative to where you ran it).")
    args = parser.parse_args(argv)
    output_dir = cli.user_path(args.output_dir)
    try:
        pages = build_site(output_dir)
    except SiteError as error:
        cli.fail(error)
    cli.log(f"the manual, {len(pages)} pages: {os.path.join(output_dir, 'index.html')}")


if __name__ == "__main__":
    main(sys.argv[1:])
