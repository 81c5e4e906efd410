"""``outbox web``: a web view for operators over the same admin functions as the commands.

Loaded only by that command, and (but for :mod:`.config`, which the command
reads first) only with the extra ``outbox-dispatcher[web]`` installed
(Starlette, Jinja2, uvicorn): ``import outbox`` loads none of it. The
pieces, one job each: :mod:`.config` (the frozen settings), :mod:`.app`
(the composition root), :mod:`.pages`, :mod:`.why` and :mod:`.actions`
(the handlers), :mod:`.chart` (the last hour, drawn), :mod:`.params` and
:mod:`.search` (what a request asks, read as the commands read it),
:mod:`.db` (the view's own connections), :mod:`.cache` (the overview's
counts), :mod:`.guard` (Host, password, headers, tokens), :mod:`.render`
(templates and JSON), :mod:`.state` (what requests share) and
:mod:`.serve` (uvicorn).
"""
