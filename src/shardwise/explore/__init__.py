"""`shardwise explore`: the analyses of the command line as an interactive page in the browser.

Every view asks the question of the command a user would type through the request layer the
command line itself uses (`runner.run`, in a worker process under a time limit: `workers`), built
on the server from its checked controls (`checks`), so the page and the CLI cannot disagree, and
each view shows that command for copying. Nothing a
browser sends is run or used as a path; every request is checked before Dash sees it (`guard`). Controls live
in the URL's query string (`state`), so a view can be shared. Dash is an optional extra
(`pip install 'shardwise[explore]'`); nothing here is imported by the core.
"""
