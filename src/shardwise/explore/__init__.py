"""`shardwise explore`: the analyses of the command line as an interactive page in the browser.

Every view runs the same command a user would type (`runner.run`, in-process, with `--json`), so
the page and the CLI cannot disagree, and each view shows that command for copying. Controls live
in the URL's query string (`state`), so a view can be shared. Dash is an optional extra
(`pip install 'shardwise[explore]'`); nothing here is imported by the core.
"""
