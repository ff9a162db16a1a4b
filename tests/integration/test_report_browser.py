"""playbooks/report.yml rendered by a real browser (Debian's chromium, headless, driven over the DevTools protocol).

Two private libvirt hosts: a VM migrated from the first to the second (a real live migration, so the report has a
recent migration), a VM that runs as recorded, and one stopped behind the collection's back (drift). The report is
opened in headless Chromium; the page must load no resource from the network, log no console error and throw no
exception; the screenshot must not be blank (pixel variety), the four state diagrams must be drawn as SVG images of
a real size, and the status cells must show their colours. The same checks are run on a broken page first, so a
checker that sees nothing cannot pass.
"""

import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
import urllib.request
import xml.etree.ElementTree as ET
import zlib

import libvirt
import pytest
import websocket

from tests.integration.ansible_run import ROOT, run_module, run_playbook
from tools.virtlab import domains

CHROMIUM = shutil.which('chromium')
SVG = '{http://www.w3.org/2000/svg}'


def _png_pixels(data):
    """(width, height, rows of RGB(A) bytes) of an 8-bit non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG'
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack('>I4s', data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b'IHDR':
            header = struct.unpack('>IIBBBBB', body)
        elif kind == b'IDAT':
            idat.append(body)
    width, height, depth, colour, dummy_c, dummy_f, interlace = header
    assert depth == 8 and interlace == 0 and colour in (2, 6), header
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(b''.join(idat)), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif kind == 3:
            for i in range(stride):
                line[i] = (line[i] + ((line[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 255
        elif kind == 4:
            for i in range(stride):
                a, b, c = (line[i - bpp] if i >= bpp else 0), prev[i], (prev[i - bpp] if i >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return width, height, bpp, rows


def pixel_variety(png):
    """(distinct colours, share of pixels that are not the most common colour) of a PNG screenshot."""
    width, height, bpp, rows = _png_pixels(png)
    counts = {}
    for line in rows:
        for x in range(0, width * bpp, bpp):
            key = bytes(line[x:x + 3])
            counts[key] = counts.get(key, 0) + 1
    return len(counts), 1 - max(counts.values()) / float(width * height)


class Page:
    """One headless Chromium tab over the DevTools protocol; records console errors, exceptions and network requests."""

    def __init__(self, profile):
        self.proc = subprocess.Popen([CHROMIUM, '--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--no-default-browser-check',
                                      '--disable-extensions', '--disable-background-networking', '--disable-component-update',
                                      '--remote-debugging-port=0', '--user-data-dir=' + profile, '--window-size=1280,1000', 'about:blank'],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        active = os.path.join(profile, 'DevToolsActivePort')
        deadline = time.monotonic() + 30
        while not (os.path.exists(active) and open(active, encoding='utf-8').read().count('\n') >= 1):
            assert time.monotonic() < deadline and self.proc.poll() is None, 'chromium did not start'
            time.sleep(0.05)
        port = int(open(active, encoding='utf-8').read().split()[0])
        with urllib.request.urlopen('http://127.0.0.1:%d/json/list' % port, timeout=10) as reply:
            target = [t for t in json.load(reply) if t['type'] == 'page'][0]
        self.ws = websocket.create_connection(target['webSocketDebuggerUrl'], timeout=30, suppress_origin=True)
        self.next_id, self.events = 0, []
        for method in ('Page.enable', 'Runtime.enable', 'Log.enable', 'Network.enable'):
            self.call(method)

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({'id': self.next_id, 'method': method, 'params': params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get('id') == self.next_id:
                assert 'error' not in message, (method, message)
                return message['result']
            self.events.append(message)

    def wait_event(self, method):
        while True:
            message = json.loads(self.ws.recv())
            if message.get('method') == method:
                return message
            if 'method' in message:
                self.events.append(message)

    def load(self, url):
        """Open url; return what went wrong (console errors, exceptions, requests that left the machine)."""
        self.events = []
        self.call('Page.navigate', url=url)
        self.wait_event('Page.loadEventFired')
        self.call('Runtime.evaluate', expression='new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))', awaitPromise=True)
        problems = []
        for event in self.events:
            method, params = event.get('method'), event.get('params', {})
            if method == 'Runtime.exceptionThrown':
                problems.append('exception: %s' % params['exceptionDetails'].get('text'))
            elif method == 'Runtime.consoleAPICalled' and params['type'] in ('error', 'assert', 'warning'):
                problems.append('console %s: %s' % (params['type'], [a.get('value') for a in params['args']]))
            elif method == 'Log.entryAdded' and params['entry']['level'] in ('error', 'warning'):
                problems.append('log %s: %s' % (params['entry']['level'], params['entry']['text']))
            elif method == 'Network.requestWillBeSent' and not params['request']['url'].startswith(('file:', 'data:', 'about:')):
                problems.append('network: %s' % params['request']['url'])
        return problems

    def evaluate(self, expression):
        return self.call('Runtime.evaluate', expression=expression, returnByValue=True)['result'].get('value')

    def screenshot(self, clip, scale=1):
        import base64  # pylint: disable=import-outside-toplevel
        params = {'format': 'png', 'captureBeyondViewport': True, 'clip': dict(clip, scale=scale)}
        return base64.b64decode(self.call('Page.captureScreenshot', **params)['data'])

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.mark.skipif(CHROMIUM is None, reason='Debian package chromium (APT_PACKAGES) is not installed')
def test_report_renders_in_headless_chromium(libvirt_hosts, tmp_path):
    src, dst = libvirt_hosts[0], libvirt_hosts[1]
    conns = [libvirt.open(src.uri), libvirt.open(dst.uri)]
    names = ('rb-moved', 'rb-drift')
    profile = tempfile.mkdtemp(prefix='chromium-', dir=str(tmp_path))
    page = None
    try:
        for conn in conns:
            for name in names:
                domains.remove_domain(conn, name)
        made = run_module('vm', {'uri': src.uri, 'vms': [{'name': name} for name in names], 'memory': '64MiB', 'domain_type': 'qemu',
                                 'state': 'running', 'shutdown_timeout': 0})
        assert made['_rc'] == 0, made
        conns[0].lookupByName('rb-drift').destroy()  # behind the collection's back: drift
        moved = run_module('migration', {'uri': src.uri, 'name': 'rb-moved', 'target_uri': dst.uri})
        assert moved['_rc'] == 0 and moved['phase'] == 'Succeeded', moved
        html = tmp_path / 'report.html'
        rc, out = run_playbook(os.path.join(ROOT, 'playbooks', 'report.yml'), extra_vars={'report_uris': [src.uri, dst.uri], 'report_path': str(html)})
        assert rc == 0, out
        text = html.read_text(encoding='utf-8')
        assert '<script' not in text.lower() and '://' not in text.replace('xmlns="%s"' % SVG[1:-1], '').replace('qemu+unix://', ''), 'no script, no link'
        assert '<td>rb-moved</td><td>ACTIVE</td><td>RUNNING</td>' in text and '<td class="status st-ok">Running</td>' in text
        assert '<td>rb-drift</td><td>ACTIVE</td><td>SHUTDOWN</td><td>power</td><td>record STOPPED</td>' in text
        migrations = text[text.index('<h2>Recent migrations</h2>'):text.index('<h2>The state model</h2>')]
        assert '<td>rb-moved</td>' in migrations and '<td class="status st-ok">Succeeded</td>' in migrations, migrations
        assert re.search(r'<td>live</td>.*<td>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</td><td>\d{4}-', migrations, re.S), migrations
        # the four diagrams are inline SVG documents, one box per state
        svgs = [ET.fromstring(text[start:text.index('</svg>', start) + 6]) for start in [i for i in range(len(text)) if text.startswith('<svg ', i)]]
        assert [s.find(SVG + 'title').text for s in svgs] == ['vm_state and the actions that move it', 'Instance phase', 'Migration phases', 'Snapshot phases']
        assert 'ACTIVE' in [t.text for t in svgs[0].iter(SVG + 'text')] and 'PreparingTarget' in [t.text for t in svgs[2].iter(SVG + 'text')]

        page = Page(profile)
        # the checker sees a broken page: a console error, an exception, a request to the network and a blank screen
        broken = page.load('data:text/html,<body><script>console.error("boom"); undefined_call();</script>'
                           '<link rel="stylesheet" href="http://192.0.2.1/x.css"></body>')
        assert any(p.startswith('console error') for p in broken) and any(p.startswith('exception') for p in broken), broken
        assert any(p.startswith('network') for p in broken), broken
        assert pixel_variety(page.screenshot({'x': 0, 'y': 0, 'width': 400, 'height': 300}, scale=0.5))[0] <= 2

        problems = page.load('file://' + str(html))
        assert problems == [], problems
        sizes = page.evaluate("JSON.stringify(Array.from(document.querySelectorAll('svg.state-diagram')).map(s => {"
                              "const r = s.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; }))")
        sizes = json.loads(sizes)
        assert len(sizes) == 4 and all(w > 150 and h > 150 for x, y, w, h in sizes), sizes
        colour = page.evaluate("getComputedStyle(document.querySelector('td.status.st-ok')).backgroundColor")
        assert colour == 'rgb(216, 240, 216)', colour
        colours, covered = pixel_variety(page.screenshot({'x': 0, 'y': 0, 'width': 1280, 'height': 800}, scale=0.5))
        assert colours >= 20 and covered > 0.05, (colours, covered)
        x, y, w, h = sizes[0]
        colours, covered = pixel_variety(page.screenshot({'x': x, 'y': y, 'width': min(w, 900), 'height': min(h, 700)}, scale=0.5))
        assert colours >= 10 and covered > 0.03, ('the vm_state diagram looks blank', colours, covered)
    finally:
        if page is not None:
            page.close()
        for conn in conns:
            for name in names:
                domains.remove_domain(conn, name)
            conn.close()
