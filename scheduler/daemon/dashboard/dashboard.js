  const REFRESH_MS = 5000;
  const FETCH_TIMEOUT_MS = 20000;
  const AGG_NODES = 512;            // above this many nodes the map starts aggregated
  const AGG_GPUS = 4096;            // ... or above this many GPUs
  const MAX_ROWS = 500;             // rows per job table
  const MAX_LEGEND_JOBS = 24;
  const TOKEN_KEY = 'toposched.token';
  const NODE_STATES = ['up', 'draining', 'drained', 'down', 'suspect'];
  const HEALTH = ['healthy', 'degraded', 'failed'];
  const HEALTH_RANK = { healthy: 0, degraded: 1, failed: 2 };

  const $ = (id) => document.getElementById(id);
  const body = document.body;

  let token = null;
  let timer = null;
  let inFlight = false;
  let generation = 0;          // bumped on sign-in/out: stale answers are dropped
  let whoami = null;
  let readyOnce = false;
  const lastOk = {};           // section -> time of its last successful render

  const view = {
    jobsById: new Map(),
    mapSig: null,
    nodeEls: [],             // per-GPU mode: [{el, cells: [el...], key}]
    groups: [],              // {statEl, idx: [node indices], el?}: pod, leaf and HBD headers
    aggregated: null,        // null until GET /v1/cluster answered; true above AGG_NODES / AGG_GPUS
    domains: null,           // indexDomains(GET /v1/cluster?by=domain .domains)
    clusterData: null,       // the last GET /v1/cluster answer
    drill: [],               // aggregated view: names from the top down to the domain shown
    again: false,            // a drill-down while a refresh was in flight: refresh once more
    highlight: null,         // job id (number) or null
    lastNodes: null,
    lastJobs: [],
    lastTenants: null,
    tierNames: { hbd: 'HBD', leaf: 'leaf', pod: 'pod' },   // from GET /v1/cluster when it says
  };

  // ---------- DOM helpers: strings only ever go through textContent / setAttribute ----------
  function el(tag, attrs) {
    const e = document.createElement(tag);
    if (attrs) setAttrs(e, attrs);
    for (let i = 2; i < arguments.length; i++) append(e, arguments[i]);
    return e;
  }
  const SVGNS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs) {
    const e = document.createElementNS(SVGNS, tag);
    if (attrs) setAttrs(e, attrs);
    for (let i = 2; i < arguments.length; i++) append(e, arguments[i]);
    return e;
  }
  function setAttrs(e, attrs) {
    for (const k in attrs) {
      const v = attrs[k];
      if (v === null || v === undefined || v === false) continue;
      if (k === 'text') e.textContent = String(v);
      else if (k === 'class') e.setAttribute('class', String(v));
      else if (k === 'style' && typeof v === 'object') Object.assign(e.style, v);
      else if (k.startsWith('on') && typeof v === 'function') e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
  }
  function append(e) {
    for (let i = 1; i < arguments.length; i++) {
      const c = arguments[i];
      if (c === null || c === undefined || c === false) continue;
      if (Array.isArray(c)) { for (const x of c) append(e, x); continue; }
      e.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }
  const str = (v) => (v === null || v === undefined) ? '' : String(v);
  const num = (v) => (typeof v === 'number' && isFinite(v)) ? v : 0;
  const NF = new Intl.NumberFormat('en-US');
  const fmt = (v) => (typeof v === 'number' && isFinite(v)) ? NF.format(v) : '\u2014';
  const plural = (n, w) => fmt(n) + ' ' + w + (n === 1 ? '' : 's');
  const pct = (a, b) => b > 0 ? (100 * a / b) : 0;
  function fmtTime(ms) {
    if (typeof ms !== 'number') return '—';
    const d = new Date(ms);
    const p = (x) => String(x).padStart(2, '0');
    return p(d.getHours()) + ':' + p(d.getMinutes()) + ':' + p(d.getSeconds());
  }
  function fmtAgo(ms) {
    if (typeof ms !== 'number') return '—';
    let s = Math.max(0, Math.round((Date.now() - ms) / 1000));
    if (s < 60) return s + ' s ago';
    const m = Math.floor(s / 60); if (m < 60) return m + ' min ago';
    const h = Math.floor(m / 60); if (h < 48) return h + ' h ' + (m % 60) + ' min ago';
    return Math.floor(h / 24) + ' d ago';
  }

  // ---------- job colours: one per job id, the same on the map, the legend and the tables.
  // Hues step by the golden-ratio share of 55..330 degrees (no red or amber: those mark failed
  // and degraded GPUs), so consecutive ids land far apart; ids 3, 5 or 8 apart come within
  // 15..40 degrees, so lightness cycles through three bands and saturation through two: such
  // ids differ in one or both. ----------
  const colorCache = new Map();
  function jobColor(id) {
    let c = colorCache.get(id);
    if (c) return c;
    const n = Math.abs(Math.trunc(Number(id))) || 0;
    const HUE_LO = 55, HUE_SPAN = 275;
    const hue = HUE_LO + (n * HUE_SPAN * 0.3819660113) % HUE_SPAN;
    const light = [44, 60, 32][n % 3], sat = [72, 48][n % 2];
    c = 'hsl(' + hue.toFixed(1) + ', ' + sat + '%, ' + light + '%)';
    colorCache.set(id, c);
    return c;
  }
  const OTHER_LABEL = 'busy (other tenant)';
  function jobLabel(id) {
    if (!(id > 0)) return OTHER_LABEL;
    const j = view.jobsById.get(id);
    if (!j) return 'job ' + id;
    return 'job ' + id + (j.name ? ' "' + j.name + '"' : '') + (j.tenant ? ' (' + j.tenant + ')' : '');
  }

  // ---------- API ----------
  class ApiError extends Error {
    constructor(status, code, message, path) { super(message); this.status = status; this.code = code; this.path = path; }
  }
  async function api(path) {
    const ctl = new AbortController();
    const t = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
    try {
      let r;
      try {
        r = await fetch(path, {
          headers: { 'Authorization': 'Bearer ' + token, 'Accept': 'application/json' },
          signal: ctl.signal, cache: 'no-store', credentials: 'omit',
        });
      } catch (e) {
        throw new ApiError(0, 'network', e && e.name === 'AbortError' ? 'timed out after ' + FETCH_TIMEOUT_MS / 1000 + ' s' : 'network error (daemon unreachable?)', path);
      }
      let data = null;
      try { data = await r.json(); } catch (e) { data = null; }
      if (!r.ok) {
        const er = (data && typeof data === 'object' && data.error) || {};
        throw new ApiError(r.status, str(er.code) || 'http_' + r.status, str(er.message) || r.statusText || 'HTTP ' + r.status, path);
      }
      if (data === null || typeof data !== 'object') throw new ApiError(r.status, 'bad_response', 'answer is not a JSON object', path);
      return data;
    } finally {
      clearTimeout(t);
    }
  }

  // ---------- token handling ----------
  function takeTokenFromFragment() {
    const h = location.hash;
    if (!h || h.length < 2) return null;
    const p = new URLSearchParams(h.slice(1));
    const t = p.get('token');
    if (t === null) return null;
    history.replaceState(null, '', location.pathname + location.search);
    return t.trim();
  }
  function storeToken(t) {
    try { if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY); } catch (e) { /* storage off */ }
  }
  function loadToken() {
    try { return sessionStorage.getItem(TOKEN_KEY); } catch (e) { return null; }
  }
  function signIn(t) {
    token = t; storeToken(t);
    generation++; whoami = null; readyOnce = false;
    for (const k in lastOk) delete lastOk[k];
    body.dataset.ready = '0';
    clearTimeout(timer); timer = null;
    $('login').hidden = true;
    $('login-message').textContent = '';
    body.dataset.state = 'loading';
    inFlight = false;
    refresh();
  }
  function showLogin(message) {
    generation++;
    token = null; storeToken(null); whoami = null; readyOnce = false;
    clearTimeout(timer); timer = null;
    body.dataset.ready = '0';
    body.dataset.state = 'login';
    $('whoami').textContent = '';
    $('login-message').textContent = message || '';
    $('login').hidden = false;
    $('login-token').value = '';
    $('login-token').focus();
  }

  // ---------- refresh loop: one at a time, next one 5 s after the previous ends ----------
  function scheduleNext() {
    clearTimeout(timer);
    timer = token ? setTimeout(refresh, REFRESH_MS) : null;
  }
  async function refresh() {
    if (inFlight || !token) return;
    inFlight = true;
    clearTimeout(timer); timer = null;
    const gen = generation;
    body.classList.add('busy');
    try {
      const eps = [
        ['cluster', '/v1/cluster?by=domain'],
        ['jobs', '/v1/jobs?limit=10000'],
        ['tenants', '/v1/tenants'],
        ['utilization', '/v1/utilization'],
        ['partitions', '/v1/partitions'],
        ['reservations', '/v1/reservations'],
      ];
      if (!whoami) eps.push(['whoami', '/v1/whoami']);
      const res = await Promise.allSettled(eps.map((e) => api(e[1])));
      if (gen !== generation) return;              // signed out/in meanwhile
      const data = {}, failed = {};
      let unauth = null;
      eps.forEach((e, i) => {
        const r = res[i];
        if (r.status === 'fulfilled') data[e[0]] = r.value;
        else { failed[e[0]] = r.reason; if (r.reason && r.reason.status === 401) unauth = r.reason; }
      });
      if (unauth) { showLogin('Token refused: ' + unauth.message); return; }
      // The map's nodes, once the cluster's size is known: all of them for a small cluster, in the
      // aggregated view only those of the leaf or HBD drilled into.
      if (data.cluster) {
        view.clusterData = data.cluster;
        view.aggregated = isLarge(data.cluster);
        view.domains = indexDomains(data.cluster.domains);
      }
      const np = nodesPath();
      if (np) {
        try { data.nodes = await api(np); } catch (e) {
          if (e && e.status === 401) { showLogin('Token refused: ' + e.message); return; }
          failed.nodes = e;
        }
        if (gen !== generation) return;
      }
      const mapData = { cluster: data.cluster || view.clusterData, nodes: data.nodes || null };
      if (view.aggregated !== null && !failed.nodes) data.nodes = mapData;
      else if (!failed.nodes) failed.nodes = failed.cluster || new ApiError(0, 'no_data', 'the cluster size is not known yet', '/v1/cluster');

      const errors = [];
      let complete = true;
      const section = (name, fn) => {
        const err = failed[name], box = $('serr-' + name);
        const inline = (m) => { box.textContent = m; box.hidden = !m; };
        if (err) {
          if (err.status === 403) { inline(''); fn(null, err); return; }   // not allowed: shown as such
          complete = false;
          const m = 'GET ' + str(err.path) + ': ' + (err.status ? err.status + ' ' : '') + str(err.code) + ' \u2014 ' + err.message;
          errors.push(m);
          inline(m + (lastOk[name] ? ' (showing data from ' + fmtTime(lastOk[name]) + ')' : ''));
          return;
        }
        try { fn(data[name], null); lastOk[name] = Date.now(); inline(''); } catch (e) {
          complete = false;
          errors.push('rendering ' + name + ' failed: ' + (e && e.message));
          inline('rendering failed: ' + (e && e.message));
          console.error('dashboard: rendering ' + name + ' failed', e);
        }
      };
      const t0 = performance.now();
      if (data.whoami) { whoami = data.whoami; renderWhoami(); }
      section('cluster', renderSummary);
      section('jobs', renderJobs);               // before the map: names for titles and legend
      section('nodes', renderMap);
      section('tenants', renderTenants);
      section('utilization', renderUtil);
      section('partitions', renderPartitions);
      section('reservations', renderReservations);

      body.dataset.renderMs = (performance.now() - t0).toFixed(1);
      const now = Date.now();
      $('last-refresh').textContent = 'updated ' + fmtTime(now);
      body.dataset.lastRefresh = String(now);
      body.dataset.refreshes = String(Number(body.dataset.refreshes || 0) + 1);
      showErrors(errors, now);
      body.dataset.state = errors.length ? 'error' : 'ok';
      if (complete && !readyOnce) { readyOnce = true; body.dataset.ready = '1'; }
    } catch (e) {
      console.error('dashboard: refresh failed', e);
      showErrors(['refresh failed: ' + (e && e.message)], Date.now());
      body.dataset.state = 'error';
    } finally {
      if (gen === generation) {
        inFlight = false;
        body.classList.remove('busy');
        if (view.again) { view.again = false; refresh(); } else scheduleNext();
      }
    }
  }
  function showErrors(errors, now) {
    const box = $('errors');
    box.replaceChildren();
    if (!errors.length) { box.hidden = true; return; }
    append(box, el('div', null, el('b', { text: 'Refresh at ' + fmtTime(now) + ' incomplete' }), ' \u2014 sections below may show older data:'));
    for (const m of errors) append(box, el('div', { text: m }));
    box.hidden = false;
  }
  function renderWhoami() {
    const w = whoami || {};
    $('whoami').replaceChildren(el('b', { text: str(w.user) || '?' }), ' \u00b7 ' + str(w.role) + (w.tenant ? ' \u00b7 ' + str(w.tenant) : ''));
  }

  // ---------- summary cards ----------
  function card(key, label, value, sub, extraClass) {
    return el('div', { class: 'card' + (extraClass ? ' ' + extraClass : '') },
      el('div', { class: 'k', text: label }),
      el('div', { class: 'v', 'data-stat': key, 'data-value': typeof value === 'number' ? value : '', text: fmt(value) }),
      el('div', { class: 's', text: sub || '\u00a0' }));
  }
  function renderSummary(c, err) {
    const box = $('summary');
    if (err) { box.replaceChildren(el('div', { class: 'card' }, el('div', { class: 'k', text: 'Cluster' }), el('div', { class: 's', text: 'not visible to this role' }))); return; }
    const g = c.gpus || {}, j = c.jobs || {}, t = c.topology || {};
    const tiers = Array.isArray(t.tiers) ? t.tiers.map((x) => (x && typeof x === 'object') ? str(x.name) : str(x)).filter(Boolean) : [];
    $('topo-name').textContent = t.name ? str(t.name) + (tiers.length ? '  \u00b7  ' + tiers.join(' \u203a ') : '') : 'no topology loaded';
    const total = num(g.total);
    // optional fields (not in docs/api.md): topology.hbd_tier / leaf_tier name the tiers
    const li = tiers.indexOf(str(t.leaf_tier));
    view.tierNames = { hbd: str(t.hbd_tier) || 'HBD', leaf: str(t.leaf_tier) || 'leaf', pod: (li >= 0 && tiers[li + 1]) || 'pod' };
    if (view.tierNames.hbd === tiers[0]) view.tierNames.hbd = 'node';
    box.replaceChildren(
      card('gpus-total', 'GPUs', g.total, t.name ? 'topology ' + str(t.name) : 'no topology'),
      card('gpus-allocated', 'Allocated', g.allocated, pct(num(g.allocated), total).toFixed(1) + ' % of total'),
      card('gpus-free', 'Free', g.free, pct(num(g.free), total).toFixed(1) + ' %'),
      card('gpus-failed', 'Failed GPUs', g.failed, '', num(g.failed) > 0 ? 'warn' : ''),
      card('gpus-unavailable', 'Unavailable', g.unavailable, 'nodes not up'),
      card('jobs-running', 'Running jobs', j.running, ''),
      card('jobs-queued', 'Queued jobs', j.queued, ''),
      card('jobs-held', 'Held jobs', j.held, ''));
  }

  // ---------- jobs ----------
  function renderJobs(d, err) {
    const rt = $('running-table').tBodies[0], qt = $('queue-table').tBodies[0];
    if (err) {
      view.jobsById = new Map(); view.lastJobs = [];
      rt.replaceChildren(emptyRow(10, 'Jobs are not visible to this role.'));
      qt.replaceChildren(emptyRow(10, 'Jobs are not visible to this role.'));
      return;
    }
    const jobs = Array.isArray(d.jobs) ? d.jobs : [];
    view.jobsById = new Map(jobs.map((j) => [j.id, j]));
    view.lastJobs = jobs;
    $('jobs-note').textContent = d.next_after !== null && d.next_after !== undefined ? 'Only the first ' + fmt(jobs.length) + ' live jobs are shown.' : '';
    updateTenantFilter();
    drawJobTables();
  }
  function updateTenantFilter() {
    const sel = $('tenant-filter');
    const names = new Set();
    for (const j of view.lastJobs) if (j.tenant) names.add(str(j.tenant));
    if (view.lastTenants) for (const t of view.lastTenants) if (t.name) names.add(str(t.name));
    const sorted = Array.from(names).sort();
    const have = Array.from(sel.options).slice(1).map((o) => o.value);
    if (have.join('\n') === sorted.join('\n')) return;
    const cur = sel.value;
    sel.replaceChildren(el('option', { value: '', text: 'all tenants' }), sorted.map((n) => el('option', { value: n, text: n })));
    sel.value = sorted.includes(cur) ? cur : '';
  }
  function emptyRow(cols, text) {
    return el('tr', { class: 'empty' }, el('td', { colspan: cols, text: text }));
  }
  function inTenant(j, t) {
    if (!t) return true;
    const n = str(j.tenant);
    return n === t || n.startsWith(t + '/');
  }
  function drawJobTables() {
    const t = $('tenant-filter').value;
    const jobs = view.lastJobs.filter((j) => inTenant(j, t));
    const running = jobs.filter((j) => j.state === 'running' || j.state === 'preempting')
      .sort((a, b) => str(a.tenant).localeCompare(str(b.tenant)) || a.id - b.id);
    const queue = jobs.filter((j) => !(j.state === 'running' || j.state === 'preempting'))
      .sort((a, b) => (a.queue_position == null) - (b.queue_position == null) || num(a.queue_position) - num(b.queue_position) || a.id - b.id);
    const runGpus = running.reduce((s, j) => s + num(j.gpus), 0);
    const qGpus = queue.reduce((s, j) => s + num(j.gpus), 0);
    $('running-caption').textContent = plural(running.length, 'job') + ' \u00b7 ' + fmt(runGpus) + ' GPUs' + (t ? ' \u00b7 tenant ' + t : '');
    $('queue-caption').textContent = plural(queue.length, 'job') + ' \u00b7 ' + fmt(qGpus) + ' GPUs wanted' + (t ? ' \u00b7 tenant ' + t : '');
    const rows = (list, fn, cols, emptyText) => {
      const out = list.slice(0, MAX_ROWS).map(fn);
      if (!list.length) out.push(emptyRow(cols, emptyText));
      if (list.length > MAX_ROWS) out.push(emptyRow(cols, fmt(list.length - MAX_ROWS) + ' more not shown'));
      return out;
    };
    $('running-table').tBodies[0].replaceChildren(...rows(running, (j) => jobRow(j, false), 11, 'No running jobs.'));
    $('queue-table').tBodies[0].replaceChildren(...rows(queue, (j) => jobRow(j, true), 10, 'The queue is empty.'));
  }
  function jobRow(j, queued) {
    const id = j.id;
    const st = str(j.state);
    const stClass = ['running', 'queued', 'held', 'preempting'].includes(st) ? st : '';
    const cells = [];
    if (queued) cells.push(el('td', { class: 'num', text: j.queue_position == null ? '\u2014' : fmt(j.queue_position) }));
    cells.push(el('td', null, el('span', { class: 'jobid' },
      queued ? null : el('span', { class: 'sw', style: { backgroundColor: jobColor(id) } }), '#' + str(id))));
    cells.push(el('td', { text: str(j.tenant) }), el('td', { text: str(j.user) }),
      el('td', { class: 'name', title: str(j.name), text: str(j.name) }),
      el('td', null, el('span', { class: 'badge ' + stClass, text: st })),
      el('td', { class: 'num', text: fmt(j.gpus) }));
    if (!queued) {
      cells.push(el('td', { class: 'num', text: fmt(j.nodes) }));
      const slow = j.predicted_slowdown;
      cells.push(el('td', { class: 'num slowdown' + (slow != null && slow >= 1.1 ? ' slow' : ''),
        title: slow == null ? 'no prediction: the job has no whole placement yet' : 'predicted slowdown',
        text: slow == null ? '\u2014' : Number(slow).toFixed(2) + 'x' }));
    }
    cells.push(el('td', { class: 'num', text: fmt(j.priority) }));
    if (queued) cells.push(el('td', { title: j.submit_ms ? new Date(j.submit_ms).toISOString() : '', text: fmtAgo(j.submit_ms) }));
    else cells.push(el('td', { title: j.start_ms ? new Date(j.start_ms).toISOString() : '', text: fmtAgo(j.start_ms) }));
    cells.push(el('td', { class: 'reason', text: str(j.reason) }));
    const tr = el('tr', { 'data-job-id': str(id), 'data-state': st, class: view.highlight === id ? 'sel' : '' }, cells);
    if (!queued) { tr.style.cursor = 'pointer'; tr.addEventListener('click', () => toggleHighlight(id)); tr.title = 'Click to highlight on the map'; }
    return tr;
  }

  // ---------- cluster map ----------
