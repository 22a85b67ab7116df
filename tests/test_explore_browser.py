"""`shardwise explore` in a real headless browser (Chromium from the system's packages, driven by
Selenium with the system's chromedriver; nothing is downloaded). Each page is loaded, controls are
changed, the numbers are compared with the CLI's for the same inputs, a bad input must show the
CLI's message next to its control, and screenshots go to build/explore/. The re-render time of a
slider move is measured and written there too, build/explore/timings.json (reported, not asserted)."""

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("dash", reason="the explorer is an optional extra: pip install 'shardwise[explore]'")
webdriver = pytest.importorskip("selenium.webdriver", reason="browser tests need selenium (the test extra)")

from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from shardwise.explore import runner, state  # noqa: E402

pytestmark = pytest.mark.slow
ARTIFACTS = Path(__file__).resolve().parents[1] / "build" / "explore"
BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
DRIVER = shutil.which("chromedriver")
WAIT_S = 60


@pytest.fixture(scope="module")
def server():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardwise", "explore", "--no-browser", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"the explorer did not start: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def browser():
    if BROWSER is None or DRIVER is None:
        pytest.skip("no Chromium and chromedriver here: apt-get install chromium chromium-driver (.ci/run does)")
    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        opts.add_argument(arg)
    opts.binary_location = BROWSER
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the page's console, for get_log
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


def _open(browser, url: str, page: str) -> str:
    """Load a view and wait for its numbers; returns its summary line."""
    browser.get(url)
    return _summary(browser, page)


def _summary(browser, page: str) -> str:
    def ready(d):
        found = d.find_elements(By.ID, f"{page}-summary")
        return found and found[0].text

    return WebDriverWait(browser, WAIT_S).until(ready)


def _file_input(browser, kind: str):
    """The upload control's file input, once React has rendered it (it can come after the summary)."""
    css = f"#{kind}-upload input[type=file]"
    return WebDriverWait(browser, WAIT_S).until(lambda d: (d.find_elements(By.CSS_SELECTOR, css) or [None])[0])


def _idle(browser) -> None:
    """Wait until no callback is in flight (Dash titles the page "Updating..." while one is)."""
    WebDriverWait(browser, WAIT_S).until(lambda d: d.title != "Updating...")


def _type(browser, cid: str, text: str, tries: int = 3) -> None:
    """Replace a box's text and submit it, on an idle page, once the box holds the text.

    Dash's text box (dcc.Input with debounce) puts the caret back, in a zero-delay timer after each
    keystroke, where it was when the keystroke was drawn; on a loaded machine Selenium's keys can
    arrive in between and land mid-text ("batch=1.1.6"). A human does not type that fast, so a
    garbled box is typed again (at most `tries` times) rather than submitted."""
    _idle(browser)
    box = browser.find_element(By.ID, cid)
    for _ in range(tries):
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(text)
        try:
            WebDriverWait(browser, 5).until(lambda d: d.find_element(By.ID, cid).get_attribute("value") == text)
            break
        except TimeoutException:
            continue
    assert box.get_attribute("value") == text, f"{cid} holds {box.get_attribute('value')!r}, not {text!r}"
    box.send_keys(Keys.ENTER)


def test_crossover_page_shows_the_cli_crossings(server, browser):
    shown = _open(browser, server, "crossover")
    data = runner.run(state.crossover_args(state.DEFAULTS)).data
    assert shown == " | ".join(c["text"] for c in data["crossings"])
    command = browser.find_element(By.ID, "crossover-command").text
    assert command == runner.Outcome(tuple(state.crossover_args(state.DEFAULTS))).command
    assert browser.find_elements(By.CSS_SELECTOR, "#crossover-graph .js-plotly-plot")
    browser.save_screenshot(str(ARTIFACTS / "crossover.png"))


@pytest.mark.parametrize("page", ["winner-map", "planner", "serving", "timeline"])
def test_every_other_page_loads_with_the_cli_numbers(server, browser, page):
    shown = _open(browser, f"{server}?page={page}" + ("&s-plans=tp%3D8&s-output=16" if page == "serving" else ""), page)
    values = state.decode(f"?page={page}" + ("&s-plans=tp%3D8&s-output=16" if page == "serving" else ""))
    if page == "planner":
        best = runner.run(state.planner_args(values)).data["plans"][0]
        assert f"step {best['step_time_s']:.4g} s" in shown
    elif page == "timeline":
        data = runner.run(state.timeline_args(values)).data
        assert shown.startswith(f"step {data['step_time_s']:.4g} s")
    elif page == "serving":
        plan = runner.run(state.serving_args(values)).data["plans"][0]
        assert f"TPOT {plan['tpot_s'] * 1e3:.4g} ms" in shown
    else:
        assert "fastest in" in shown
    browser.save_screenshot(str(ARTIFACTS / f"{page}.png"))


def test_a_control_updates_the_numbers_and_the_url(server, browser):
    _open(browser, server, "crossover")
    _type(browser, "x-vary", "batch=1..64")
    WebDriverWait(browser, WAIT_S).until(lambda d: "batch=1..64" in d.find_element(By.ID, "crossover-command").text)
    after = _summary(browser, "crossover")
    args = [a if a != "batch=1..32" else "batch=1..64" for a in state.crossover_args(state.DEFAULTS)]
    assert after == " | ".join(c["text"] for c in runner.run(args).data["crossings"])
    WebDriverWait(browser, WAIT_S).until(lambda d: "x-vary=batch%3D1..64" in d.current_url)


def test_a_shared_url_restores_the_view(server, browser):
    _open(browser, f"{server}?x-plans=tp%3D4%3B+pp%3D2&x-batch=16&x-vary=layers%3D8..96", "crossover")
    assert browser.find_element(By.ID, "x-plans").get_attribute("value") == "tp=4; pp=2"
    command = browser.find_element(By.ID, "crossover-command").text
    assert "--plan tp=4 --plan pp=2" in command and "--vary layers=8..96" in command


def test_a_bad_input_shows_the_cli_message_next_to_its_control(server, browser):
    _open(browser, server, "crossover")
    _type(browser, "x-vary", "batch=abc")
    message = WebDriverWait(browser, WAIT_S).until(lambda d: d.find_element(By.ID, "x-vary-msg").text)
    expected = runner.run([*state.crossover_args(state.DEFAULTS)[:-4], "--vary", "batch=abc", "--global-batch", "8"])
    assert message == expected.error
    browser.save_screenshot(str(ARTIFACTS / "bad-input.png"))
    _type(browser, "x-vary", "batch=1..16")  # the server is still there and recovers
    WebDriverWait(browser, WAIT_S).until(lambda d: "batch=1..16" in d.find_element(By.ID, "crossover-command").text)
    _idle(browser)
    shown = {i: browser.find_element(By.ID, i).text for i in ("x-vary-msg", "crossover-error", "crossover-text")}
    assert shown["x-vary-msg"] == "", shown


# Set before each slider move: the browser's clock when the key reaches the page, and when the
# crossover figure has been drawn again (Plotly's afterplot event) after the new numbers arrived.
WATCH_JS = """
window.keyAt = null; window.drawnAt = null;
document.addEventListener('keydown', () => { window.keyAt = window.keyAt || performance.now(); },
                          {capture: true, once: true});
const graph = document.querySelector('#crossover-graph .js-plotly-plot');
if (graph && graph.once) { graph.once('plotly_afterplot', () => { window.drawnAt = performance.now(); }); }
return Boolean(graph && graph.once);
"""


def test_slider_move_rerender_time_is_measured(server, browser):
    """A move of the link-bandwidth slider: the time from the key reaching the page until the new
    figure is drawn (the browser's own clock), and the time until the new command is shown as the
    test driver sees it (which adds the driver's own round trips)."""
    _open(browser, server, "crossover")
    handle = WebDriverWait(browser, WAIT_S).until(  # the slider's code loads on its own, after the page
        lambda d: d.find_element(By.CSS_SELECTOR, "#x-bw [role=slider]")
    )
    drawn, driver = [], []
    for step in range(1, 8):
        before = browser.find_element(By.ID, "crossover-command").text
        watched = browser.execute_script(WATCH_JS)
        start = time.perf_counter()
        handle.send_keys(Keys.ARROW_RIGHT)
        WebDriverWait(browser, WAIT_S, poll_frequency=0.005).until(
            lambda d, b=before: d.find_element(By.ID, "crossover-command").text != b
        )
        driver.append(time.perf_counter() - start)
        assert "custom=" in browser.find_element(By.ID, "crossover-command").text, step
        if not watched:  # the figure was being replaced when the move began: time the next one
            continue
        WebDriverWait(browser, WAIT_S).until(lambda d: d.execute_script("return window.drawnAt !== null"))
        key_at, drawn_at = browser.execute_script("return [window.keyAt, window.drawnAt]")
        if key_at is not None:
            drawn.append((drawn_at - key_at) / 1e3)
    assert len(drawn) >= 3, drawn
    drawn.sort()
    driver.sort()
    report = {
        "key_to_figure_drawn_s": drawn,
        "median_s": drawn[len(drawn) // 2],
        "driver_key_to_command_shown_s": driver,
        "driver_median_s": driver[len(driver) // 2],
    }
    (ARTIFACTS / "timings.json").write_text(json.dumps(report, indent=1))
    print(
        f"slider move to figure drawn: median {report['median_s'] * 1e3:.0f} ms over {len(drawn)} moves "
        f"(through the test driver, to the command shown: {report['driver_median_s'] * 1e3:.0f} ms)"
    )


def test_an_uploaded_hugging_face_config_becomes_the_model(server, browser, small_hf_config):
    _open(browser, server, "crossover")
    _file_input(browser, "model").send_keys(str(small_hf_config))
    WebDriverWait(browser, WAIT_S).until(
        lambda d: f"--model {small_hf_config.name}" in d.find_element(By.ID, "crossover-command").text
    )  # the user's own file, not the explorer's name for it
    assert "config.json" in browser.find_element(By.ID, "model-name").text
    browser.find_element(By.ID, "model-forget").click()
    WebDriverWait(browser, WAIT_S).until(lambda d: "--model" not in d.find_element(By.ID, "crossover-command").text)


def _readme_command(words: str) -> list[str]:
    """The README recipe's command that starts `$ shardwise WORDS` (its arguments, without shardwise)."""
    import shlex

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    line = next(ln for ln in readme.splitlines() if ln.startswith(f"$ shardwise {words}"))
    return shlex.split(line)[2:]


def _cli_json(args: list[str]) -> dict:
    from click.testing import CliRunner

    from shardwise.cli import cli

    done = CliRunner().invoke(cli, [*[a for a in args if a not in ("--no-plot",)], "--json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def _url(server: str, **controls: object) -> str:
    return server + state.encode({**state.DEFAULTS, **{k.replace("_", "-"): v for k, v in controls.items()}})


def test_readme_serving_recipe_in_the_browser(server, browser):
    """'I have 8 PCIe GPUs and want to serve a model': the same plans, precision and load."""
    args = _readme_command("serve")
    expected = _cli_json(args)["plans"]
    url = _url(
        server,
        page="serving",
        s_model="llama3-70b",
        s_system="rtx4090-8x",
        s_plans="tp=8; pp=8; tp=2,pp=4",
        s_weights="int4",
        s_concurrency=32,
        s_input=512,  # the command's defaults (the page's are a longer request)
        s_output=128,
    )
    shown = _open(browser, url, "serving")
    for p in expected:
        assert f"{p['plan']}: TTFT {p['ttft_s'] * 1e3:.4g} ms, TPOT {p['tpot_s'] * 1e3:.4g} ms" in shown, shown
    command = browser.find_element(By.ID, "serving-command").text
    assert "--weight-precision int4" in command and "--concurrency 32" in command
    browser.save_screenshot(str(ARTIFACTS / "recipe-serving.png"))


def test_readme_training_recipe_in_the_browser(server, browser):
    """'I have N servers and want to train a model': the network and its NICs as the recipe gives them."""
    args = _readme_command("plan")
    best = _cli_json(args)["plans"][0]
    url = _url(
        server, page="planner", p_model="llama3-8b", p_system="dgx-a100", p_nodes=2, p_inter="eth-100g", p_nics=1
    )
    url += "&p-batch=256"
    shown = _open(browser, url, "planner")
    assert f"tp={best['tp']}, pp={best['pp']}, dp={best['dp']}" in shown
    assert f"step {best['step_time_s']:.4g} s" in shown, shown
    command = browser.find_element(By.ID, "planner-command").text
    assert "--inter-link eth-100g" in command and "--nics-per-node 1" in command
    browser.save_screenshot(str(ARTIFACTS / "recipe-planner.png"))


def test_readme_crossover_recipe_in_the_browser(server, browser):
    """'Show me when TP stops paying off for my model': the same crossings (the page names each
    link by its preset, the recipe by a label)."""
    args = _readme_command("crossover")
    data = _cli_json(args)
    given = [args[i + 1] for i, a in enumerate(args) if a == "--intra-link"]  # LABEL=preset, as the README gives them
    labels = dict(g.split("=", 1) for g in given)
    expected = []
    for c in data["crossings"]:
        label, _, rest = c["text"].partition(": ")
        expected.append(f"{labels.get(label, label)}: {rest}")
    url = _url(
        server, x_model="llama3-8b", x_gpu="h100-sxm5-80gb", x_links=list(labels.values()), x_vary="batch=1..128"
    )
    shown = _open(browser, url, "crossover")
    assert shown == " | ".join(expected)
    browser.save_screenshot(str(ARTIFACTS / "recipe-crossover.png"))


def test_an_uploaded_calibration_is_applied(server, browser, tmp_path_factory):
    """'Calibrate to your own runs': a calibration file loaded in the browser gives the numbers
    `plan --calibration FILE` gives."""
    from click.testing import CliRunner

    from shardwise.cli import cli

    root = Path(__file__).resolve().parents[1]
    cal = tmp_path_factory.mktemp("cal") / "h100.yaml"
    done = CliRunner().invoke(cli, ["calibrate", str(root / "examples/calibration/h100_runs.csv"), "-o", str(cal)])
    assert done.exit_code == 0, done.output
    url = _url(server, page="planner", p_model="llama3-8b", p_system="dgx-h100", p_nodes=2)
    _open(browser, url, "planner")
    _file_input(browser, "calibration").send_keys(str(cal))
    WebDriverWait(browser, WAIT_S).until(
        lambda d: f"--calibration {cal.name}" in d.find_element(By.ID, "planner-command").text
    )
    args = state.planner_args(state.decode(url[len(server) :]))
    best = _cli_json([a for a in args if a not in ("--csv", "plans.csv")] + ["--calibration", str(cal)])["plans"][0]
    WebDriverWait(browser, WAIT_S).until(lambda d: f"step {best['step_time_s']:.4g} s" in _summary(d, "planner"))
    browser.find_element(By.ID, "calibration-forget").click()
    WebDriverWait(browser, WAIT_S).until(lambda d: "--calibration" not in d.find_element(By.ID, "planner-command").text)


@pytest.mark.parametrize("width", [1280, 390])
def test_every_page_fits_a_laptop_and_a_phone_width(server, browser, width):
    """At a laptop's 1280x800 and a phone's 390x844 no page is wider than the window (the planner's
    table scrolls in its own box), the figure takes most of the width, and the browser's console
    holds no error."""
    browser.set_window_size(width, 844 if width < 800 else 800)
    browser.get_log("browser")  # what earlier tests left
    try:
        for page in state.PAGES:
            query = f"?page={page}" + ("&s-plans=tp%3D8&s-output=16" if page == "serving" else "")
            _open(browser, server + query, page)
            _idle(browser)
            inner, scroll, graph = browser.execute_script(
                "return [window.innerWidth, document.documentElement.scrollWidth,"
                f" document.getElementById('{page}-graph').getBoundingClientRect().width]"
            )
            assert scroll <= inner, (page, scroll, inner)
            assert graph >= 0.6 * inner if width < 800 else graph >= 0.5 * inner, (page, graph, inner)
            title = browser.execute_script(  # a figure's title is not cut off at either side
                f"const t = document.querySelector('#{page}-graph .gtitle');"
                f" const box = document.querySelector('#{page}-graph .main-svg').getBoundingClientRect();"
                " const r = t.getBoundingClientRect(); return [r.left - box.left, box.right - r.right];"
            )
            assert min(title) >= 0, (page, title)
            errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
            assert not errors, (page, errors)
            browser.save_screenshot(str(ARTIFACTS / f"{page}-{width}.png"))
    finally:
        browser.set_window_size(1400, 1000)


def test_a_file_over_the_upload_limit_is_refused_with_a_message(server, browser, tmp_path):
    """The upload control drops a file over its size limit without telling the page; the page
    says why beside the button instead of doing nothing."""
    from shardwise.explore.uploads import MAX_UPLOAD_BYTES

    big = tmp_path / "big-config.json"
    big.write_text('{"pad": "' + "x" * MAX_UPLOAD_BYTES + '"}')
    _open(browser, server, "crossover")
    _file_input(browser, "model").send_keys(str(big))
    said = WebDriverWait(browser, WAIT_S).until(lambda d: d.find_element(By.ID, "model-refused").text)
    assert said.startswith("big-config.json: ") and f"at most {MAX_UPLOAD_BYTES:,} bytes" in said, said
    assert browser.find_element(By.ID, "model-name").text == ""
    assert "--model" not in browser.find_element(By.ID, "crossover-command").text
