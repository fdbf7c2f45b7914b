"""Rich display in notebooks: the HTML pieces the `_repr_html_` of tensors, definitions,
programs (tex/), schedules and stages (schedule/display.py) and compiled functions
(backends/llvm/display.py) are made of.

Everything shown is plain text made into HTML: the same index notation as `repr`, the
loop nest as `print(s)` shows it. A compiled function's LLVM IR and assembly sit in
collapsed `<details>` blocks, generated when the function is displayed (never at compile
time) and cut at `MAX_LINES` lines; the assembly of a kernel whose IR is longer than
`ASM_IR_LINES` is not generated for display (that takes LLVM about a second), only named.
"""
MAX_LINES = 400        # lines of IR or assembly shown in a display
ASM_IR_LINES = 2500    # a longer IR: its assembly is not generated for a display

_STYLE = ("font-family: var(--jp-code-font-family, monospace); font-size: 12px; "
          "line-height: 1.35")


def escape(text):
    """html.escape(text): the html package's import (its table of entities) was 2 ms of
    the imports a first compile needs, for five replacements."""
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("'", "&#x27;"))


def code(text):
    return f"<code>{escape(str(text))}</code>"


def pre(text):
    return f'<pre style="{_STYLE}; margin: 4px 0">{escape(str(text))}</pre>'


def box(title, *parts):
    body = "\n".join(p for p in parts if p)
    return f'<div class="tex-display"><div><b>{title}</b></div>\n{body}\n</div>'


def table(header, rows):
    """An HTML table; cells are text (escaped) unless given as ("html", markup)."""
    def cell(c, tag):
        return f"<{tag}>" + (c[1] if isinstance(c, tuple) else escape(str(c))) + f"</{tag}>"
    head = "<tr>" + "".join(cell(h, "th") for h in header) + "</tr>"
    body = "".join("<tr>" + "".join(cell(c, "td") for c in r) + "</tr>" for r in rows)
    return f'<table style="text-align: left">{head}{body}</table>'


def details(summary, text, max_lines=MAX_LINES):
    """A collapsed block of text, cut at `max_lines` lines."""
    lines = text.splitlines()
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"... {len(text.splitlines()) - max_lines} more lines"]
    return f"<details><summary>{escape(summary)}</summary>{pre(chr(10).join(lines))}</details>"
