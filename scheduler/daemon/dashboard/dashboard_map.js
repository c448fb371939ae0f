  // Small clusters (AGG_NODES nodes and AGG_GPUS GPUs or fewer): every GPU is a cell, grouped
  // pod > leaf > HBD, from GET /v1/nodes. Larger ones start aggregated: one tile per domain
  // below the root with a tile per child inside, from GET /v1/cluster?by=domain; a click drills
  // down, and only a leaf or an HBD reads its nodes (GET /v1/nodes?domain=NAME) and shows cells.
  function isLarge(c) {
    const t = (c && c.topology) || {}, g = (c && c.gpus) || {};
    return num(t.nodes) > AGG_NODES || num(g.total) > AGG_GPUS;
  }
  function indexDomains(list) {
    const byName = new Map(), kids = new Map();
    let lowest = null;
    for (const d of Array.isArray(list) ? list : []) {
      if (!d || typeof d.name !== 'string') continue;
      byName.set(d.name, d);
      const p = d.parent == null ? '' : str(d.parent);
      if (!kids.has(p)) kids.set(p, []);
      kids.get(p).push(d);
      lowest = str(d.tier);                        // listed top tier first
    }
    return { byName: byName, kids: kids, lowest: lowest };
  }
  // The drilled-into domain, or null at the top; a path that no longer exists falls back to its
  // longest valid prefix.
  function drillDomain() {
    const ix = view.domains;
    if (!ix) return null;
    while (view.drill.length && !ix.byName.has(view.drill[view.drill.length - 1])) view.drill.pop();
    return view.drill.length ? ix.byName.get(view.drill[view.drill.length - 1]) : null;
  }
  // Whether the current level shows GPU cells (a leaf whose children are HBDs, or an HBD).
  function drillShowsNodes() {
    const d = drillDomain(), ix = view.domains;
    if (!d || !ix) return false;
    const kids = ix.kids.get(d.name) || [];
    return str(d.tier) === ix.lowest || !kids.length || str(kids[0].tier) === ix.lowest;
  }
  function nodesPath() {
    if (view.aggregated === false) return '/v1/nodes';
    if (view.aggregated && drillShowsNodes()) return '/v1/nodes?domain=' + encodeURIComponent(view.drill[view.drill.length - 1]);
    return null;
  }
  function drillTo(path) {
    view.drill = path.slice();
    view.mapSig = null;
    if (view.clusterData) renderMap({ cluster: view.clusterData, nodes: null }, null);
    if (inFlight) view.again = true; else refresh();
  }

  function groupNodes(nodes) {
    // pods -> leaves -> hbds -> node indices, in first-appearance (topology) order
    const pods = new Map();
    nodes.forEach((n, i) => {
      const pk = str(n.pod), lk = str(n.leaf), hk = str(n.hbd) || str(n.name);
      let p = pods.get(pk); if (!p) { p = { name: pk, leaves: new Map(), idx: [] }; pods.set(pk, p); }
      let l = p.leaves.get(lk); if (!l) { l = { name: lk, hbds: new Map(), idx: [] }; p.leaves.set(lk, l); }
      let h = l.hbds.get(hk); if (!h) { h = { name: hk, idx: [] }; l.hbds.set(hk, h); }
      p.idx.push(i); l.idx.push(i); h.idx.push(i);
    });
    return pods;
  }
  function gpuCols(g) { return g <= 4 ? Math.max(1, g) : Math.min(8, Math.ceil(g / 2)); }
  function nodeCols(count, maxG) {
    // columns of node blocks in an HBD tile so the tile is a little wider than tall
    const gc = gpuCols(maxG), gr = Math.ceil(maxG / gc);
    const w = gc + 0.6, h = gr + 0.6;
    let best = 1, bestScore = Infinity;
    for (let c = 1; c <= count; c++) {
      const score = Math.abs(Math.log((c * w) / (Math.ceil(count / c) * h) / 1.6));
      if (score < bestScore - 1e-9) { best = c; bestScore = score; }
    }
    return best;
  }
  function buildCells(map, nodes) {
    const pods = groupNodes(nodes);
    const tn = view.tierNames;
    const groups = [];
    view.nodeEls = [];
    const frag = document.createDocumentFragment();
    const multiPod = !view.aggregated && (pods.size > 1 || (pods.size === 1 && Array.from(pods.keys())[0] !== ''));
    for (const p of pods.values()) {
      const podStat = el('span', { class: 'st' });
      const leavesEl = el('div', { class: 'leaves' });
      const podEl = el('div', { class: 'pod', 'data-pod': p.name },
        multiPod ? el('div', { class: 'pod-h' }, p.name ? tn.pod + ' ' + p.name : 'nodes outside any ' + tn.pod, podStat) : null, leavesEl);
      if (multiPod) groups.push({ statEl: podStat, idx: p.idx });
      for (const l of p.leaves.values()) {
        const leafStat = el('span', { class: 'st' });
        const hbdsEl = el('div', { class: 'hbds' });
        leavesEl.appendChild(el('div', { class: 'leaf', 'data-leaf': l.name },
          el('div', { class: 'leaf-h' }, l.name ? tn.leaf + ' ' + l.name : 'no ' + tn.leaf, leafStat), hbdsEl));
        groups.push({ statEl: leafStat, idx: l.idx });
        for (const h of l.hbds.values()) {
          let maxG = 1;
          for (const i of h.idx) maxG = Math.max(maxG, num(nodes[i].gpus));
          const single = h.idx.length === 1 && str(nodes[h.idx[0]].name) === h.name;
          const nodesEl = el('div', { class: 'nodes' });
          nodesEl.style.gridTemplateColumns = 'repeat(' + nodeCols(h.idx.length, maxG) + ', max-content)';
          const hbdStat = el('span', { class: 'st' });
          const hbdEl = el('div', { class: 'hbd', 'data-hbd': h.name, title: (single ? 'node ' : tn.hbd + ' ') + h.name + ' \u00b7 ' + h.idx.length + ' node(s)' },
            el('div', { class: 'hbd-h' }, (single ? '' : tn.hbd + ' ') + h.name, hbdStat), nodesEl);
          if (!single) groups.push({ statEl: hbdStat, idx: h.idx, el: hbdEl });
          hbdsEl.appendChild(hbdEl);
          for (const i of h.idx) {
            const n = nodes[i];
            const g = Math.max(0, Math.min(64, num(n.gpus)));
            const nodeEl = el('div', { class: 'node', 'data-node-name': str(n.name) });
            nodeEl.style.gridTemplateColumns = 'repeat(' + gpuCols(g) + ', var(--cell))';
            const cells = [];
            for (let k = 0; k < g; k++) {
              const c = el('span', { class: 'gpu', 'data-node': str(n.name), 'data-gpu': k });
              nodeEl.appendChild(c); cells.push(c);
            }
            nodesEl.appendChild(nodeEl);
            view.nodeEls[i] = { el: nodeEl, cells: cells, keys: new Array(g).fill(null), nkey: null };
          }
        }
      }
      frag.appendChild(podEl);
    }
    view.groups = groups;
    map.replaceChildren(frag);
  }
  function nodeStateClass(s) { return NODE_STATES.includes(s) ? s : 'unknown'; }
  function healthClass(h) { return HEALTH.includes(h) ? h : 'other'; }
  // "56/72 · 78%" and the nodes that are not up, e.g. " · 1 drained, 2 down".
  function usageText(alloc, total) { return fmt(alloc) + '/' + fmt(total) + ' \u00b7 ' + pct(alloc, total).toFixed(0) + '%'; }
  function statesText(counts) {
    const parts = [];
    for (const s of NODE_STATES) if (s !== 'up' && counts[s]) parts.push(fmt(counts[s]) + ' ' + s);
    for (const s in counts) if (!NODE_STATES.includes(s) && counts[s]) parts.push(fmt(counts[s]) + ' in another state');
    return parts.length ? parts.join(', ') : '';
  }

  function renderMap(d, err) {
    const map = $('map');
    if (err) { map.replaceChildren(el('div', { class: 'muted', text: 'Nodes are not visible to this role.' })); view.mapSig = null; $('legend').replaceChildren(); $('map-crumbs').hidden = true; return; }
    if (view.aggregated) { renderAggregated(d.cluster, d.nodes); return; }
    $('map-crumbs').hidden = true;
    renderCells(d.nodes && Array.isArray(d.nodes.nodes) ? d.nodes.nodes : [], null);
  }
  // The per-GPU map of `nodes` (the whole cluster, or one drilled-into domain when `within`).
  function renderCells(nodes, within) {
    const map = $('map');
    view.lastNodes = nodes;
    let totalG = 0;
    for (const n of nodes) totalG += num(n.gpus);
    const parts = [within ? 'D' + within.name : 'G', view.tierNames.hbd, view.tierNames.leaf, view.tierNames.pod];
    for (const n of nodes) parts.push(str(n.name) + '\u0001' + str(n.hbd) + '\u0001' + str(n.leaf) + '\u0001' + str(n.pod) + '\u0001' + num(n.gpus));
    const sig = parts.join('\u0002');
    if (!nodes.length) {
      map.replaceChildren(el('div', { class: 'muted', text: within ? 'No nodes in ' + within.name + '.' : 'No nodes: import a topology (PUT /v1/topology or topo topology import).' }));
      view.mapSig = null; map.dataset.mode = within ? 'agg-nodes' : ''; $('map-caption').textContent = ''; renderLegend([], 0); return;
    }
    if (sig !== view.mapSig) {
      map.className = nodes.length <= 64 ? 'cells-l' : nodes.length <= 400 ? 'cells-m' : 'cells-s';
      buildCells(map, nodes);
      view.mapSig = sig;
    }
    map.dataset.mode = within ? 'agg-nodes' : 'gpu';
    const perJob = new Map();          // job id -> GPUs on the map
    let alloc = 0, other = 0;
    const nodeAlloc = new Array(nodes.length).fill(0);
    for (let i = 0; i < nodes.length; i++) {
      const n = nodes[i], gj = Array.isArray(n.gpu_jobs) ? n.gpu_jobs : [];
      for (let k = 0; k < num(n.gpus); k++) {
        const j = Number(gj[k]) || 0;
        if (j > 0) perJob.set(j, (perJob.get(j) || 0) + 1);
        else if (j < 0) other++;
        if (j) nodeAlloc[i]++;
      }
      alloc += nodeAlloc[i];
    }
    updateCells(nodes);
    for (const g of view.groups) {
      let t = 0, a = 0;
      const states = {};
      for (const i of g.idx) {
        t += num(nodes[i].gpus); a += nodeAlloc[i];
        const s = str(nodes[i].state);
        if (s !== 'up') states[s] = (states[s] || 0) + 1;
      }
      const st = statesText(states);
      g.statEl.textContent = ' \u00b7 ' + usageText(a, t) + (st ? ' \u00b7 ' + st : '');
      if (g.el) { g.el.setAttribute('data-gpus', String(t)); g.el.setAttribute('data-allocated', String(a)); }
    }
    const hbdCount = map.querySelectorAll('.hbd').length;
    $('map-caption').textContent = (within ? within.tier + ' ' + within.name + ' \u00b7 ' : '') + fmt(nodes.length) + ' nodes \u00b7 ' + fmt(hbdCount) + ' ' + view.tierNames.hbd + 's \u00b7 ' +
      fmt(totalG) + ' GPUs \u00b7 ' + usageText(alloc, totalG) + ' allocated';
    renderLegend(Array.from(perJob.entries()).sort((a, b) => b[1] - a[1] || a[0] - b[0]), other);
    applyHighlight();
  }
  function updateCells(nodes) {
    for (let i = 0; i < nodes.length; i++) {
      const n = nodes[i], ne = view.nodeEls[i];
      if (!ne) continue;
      const state = str(n.state), reason = str(n.reason);
      const nkey = state + '\u0001' + reason;
      if (ne.nkey !== nkey) {
        ne.el.className = 'node ns-' + nodeStateClass(state);
        ne.el.setAttribute('data-state', state);
        ne.el.title = 'node ' + str(n.name) + (n.gpu_model ? ' \u00b7 ' + str(n.gpu_model) : '') + ': ' + state + (reason ? ' (' + reason + ')' : '');
        ne.nkey = nkey;
      }
      const gj = Array.isArray(n.gpu_jobs) ? n.gpu_jobs : [], gh = Array.isArray(n.gpu_health) ? n.gpu_health : [];
      for (let k = 0; k < ne.cells.length; k++) {
        const raw = Number(gj[k]) || 0, h = str(gh[k]) || 'healthy';
        const j = raw > 0 ? raw : 0, other = raw < 0;  // < 0: a job the caller may not see
        const label = j ? jobLabel(j) : other ? OTHER_LABEL : 'free';
        const key = raw + '\u0001' + h + '\u0001' + nkey + '\u0001' + label;
        if (ne.keys[k] === key) continue;
        ne.keys[k] = key;
        const c = ne.cells[k];
        c.className = 'gpu h-' + healthClass(h) + (j || other ? ' busy' : '') + (other ? ' other' : '');
        c.style.backgroundColor = j ? jobColor(j) : '';
        c.setAttribute('data-job', j ? String(j) : '');
        if (other) c.setAttribute('data-other', '1'); else c.removeAttribute('data-other');
        c.setAttribute('data-health', h);
        c.setAttribute('data-node-state', state);
        c.title = 'node ' + str(n.name) + ' \u00b7 GPU ' + k + (n.gpu_model ? ' (' + str(n.gpu_model) + ')' : '') + '\n' + label + '\nhealth: ' + h +
          '\nnode: ' + state + (reason ? ' (' + reason + ')' : '') + '\n' + view.tierNames.hbd + ' ' + str(n.hbd) + ' \u00b7 ' + view.tierNames.leaf + ' ' + str(n.leaf) + (n.pod ? ' \u00b7 ' + view.tierNames.pod + ' ' + str(n.pod) : '');
      }
    }
  }

  // ---------- aggregated view ----------
  function renderAggregated(cluster, nodesData) {
    const map = $('map'), ix = view.domains;
    if (!ix) return;
    const d = drillDomain();
    renderCrumbs();
    if (d && drillShowsNodes()) {
      map.dataset.drill = d.name;
      if (nodesData) { renderCells(Array.isArray(nodesData.nodes) ? nodesData.nodes : [], d); map.dataset.drillReady = d.name; }
      else if (map.dataset.drillReady !== d.name) {
        map.className = ''; map.dataset.mode = 'agg-nodes';
        map.replaceChildren(el('div', { class: 'muted', text: 'Loading the nodes of ' + d.tier + ' ' + d.name + '\u2026' }));
      }
      return;
    }
    map.dataset.drill = d ? d.name : '';
    map.dataset.drillReady = d ? d.name : '';
    map.dataset.mode = 'agg';
    map.className = 'agg';
    view.mapSig = null; view.groups = []; view.nodeEls = [];
    const kids = ix.kids.get(d ? d.name : '') || [];
    const tiles = kids.map((c) => domainTile(c, (ix.kids.get(c.name) || []), (d ? view.drill : []).concat([c.name])));
    map.replaceChildren(el('div', { class: 'tiles' }, tiles));
    const g = d ? d.gpus || {} : (cluster && cluster.gpus) || {};
    $('map-caption').textContent = (d ? d.tier + ' ' + d.name + ' \u00b7 ' : 'aggregated: ') + fmt(kids.length) + ' ' + (kids.length ? str(kids[0].tier) : 'domain') + 's \u00b7 ' +
      fmt(num(g.total)) + ' GPUs \u00b7 ' + usageText(num(g.allocated), num(g.total)) + ' allocated \u00b7 click a tile to drill down';
    // the legend: running jobs in view by GPUs (the job list knows their sizes)
    const scope = d ? (d.jobs || []).map((x) => [x.id, num(x.gpus)]) : view.lastJobs.filter((j) => j.state === 'running' || j.state === 'preempting').map((j) => [j.id, num(j.gpus)]);
    let other = 0;
    for (const c of kids) other += num(c.other_tenants_gpus);
    renderLegend(scope.sort((a, b) => b[1] - a[1] || a[0] - b[0]), other);
    applyHighlight();
  }
  function renderCrumbs() {
    const box = $('map-crumbs');
    const items = [el('button', { type: 'button', 'data-crumb': '', class: view.drill.length ? '' : 'here', text: 'cluster' })];
    items[0].addEventListener('click', () => drillTo([]));
    view.drill.forEach((name, i) => {
      const dd = view.domains.byName.get(name);
      const b = el('button', { type: 'button', 'data-crumb': name, class: i === view.drill.length - 1 ? 'here' : '', text: (dd ? dd.tier + ' ' : '') + name });
      b.addEventListener('click', () => drillTo(view.drill.slice(0, i + 1)));
      items.push(el('span', { class: 'sep', text: '\u203a' }), b);
    });
    box.replaceChildren(...items);
    box.hidden = false;
  }
  // A bar of the domain's GPUs: each listed job in its colour, other jobs, other tenants' jobs,
  // failed and unavailable GPUs, then free.
  function usageBar(dm, big) {
    const g = dm.gpus || {}, total = num(g.total);
    const bar = el('div', { class: 'ubar' + (big ? ' big' : '') });
    let shown = 0;
    const seg = (n, cls, color, title) => {
      if (n <= 0 || total <= 0) return;
      const s = el('span', { class: 'seg ' + cls, title: title, style: { width: pct(n, total).toFixed(3) + '%' } });
      if (color) s.style.backgroundColor = color;
      bar.appendChild(s);
    };
    for (const j of dm.jobs || []) { seg(num(j.gpus), 'job', jobColor(j.id), jobLabel(j.id) + ': ' + fmt(num(j.gpus)) + ' GPUs'); shown += num(j.gpus); }
    const mine = num(g.allocated) - num(dm.other_tenants_gpus);
    seg(mine - shown, 'rest', null, fmt(mine - shown) + ' GPUs of other jobs');
    seg(num(dm.other_tenants_gpus), 'other', null, OTHER_LABEL + ': ' + fmt(num(dm.other_tenants_gpus)) + ' GPUs');
    seg(num(g.failed), 'failed', null, fmt(num(g.failed)) + ' failed GPUs');
    seg(num(g.unavailable), 'unavail', null, fmt(num(g.unavailable)) + ' GPUs on nodes not up');
    return bar;
  }
  function domainAttrs(dm, cls) {
    const g = dm.gpus || {};
    return { class: cls, 'data-domain': dm.name, 'data-tier': str(dm.tier), 'data-gpus-total': num(g.total), 'data-gpus-allocated': num(g.allocated),
      'data-gpus-free': num(g.free), 'data-gpus-failed': num(g.failed), 'data-gpus-unavailable': num(g.unavailable),
      'data-jobs': (dm.jobs || []).map((j) => j.id).join(' '), 'data-other-gpus': num(dm.other_tenants_gpus) };
  }
  function domainTile(dm, kids, path) {
    const g = dm.gpus || {}, total = num(g.total), alloc = num(g.allocated);
    const st = statesText(dm.node_states || {});
    const tile = el('div', domainAttrs(dm, 'tile'),
      el('button', { type: 'button', class: 'tile-h', title: 'Show the ' + (kids.length ? kids[0].tier + 's' : 'nodes') + ' of ' + dm.tier + ' ' + dm.name },
        el('span', { class: 'nm', text: dm.tier + ' ' + dm.name }),
        el('span', { class: 'u', text: usageText(alloc, total) })),
      usageBar(dm, true),
      el('div', { class: 'tile-s' },
        el('span', { text: 'free ' + fmt(num(g.free)) }), el('span', { text: 'used ' + fmt(alloc) }),
        el('span', { class: num(g.failed) ? 'bad' : '', text: 'failed ' + fmt(num(g.failed)) }),
        num(g.unavailable) ? el('span', { text: 'unavailable ' + fmt(num(g.unavailable)) }) : null,
        el('span', { class: st ? 'warn' : 'muted', text: st ? 'nodes: ' + st : fmt(num(dm.nodes)) + ' nodes up' })),
      jobChips(dm, 4));
    tile.querySelector('.tile-h').addEventListener('click', () => drillTo(path));
    if (kids.length) {
      const minis = el('div', { class: 'minis' });
      for (const k of kids) {
        const kg = k.gpus || {}, kst = statesText(k.node_states || {});
        const top = (k.jobs || []).slice(0, 3).map((j) => '#' + j.id + ' ' + fmt(num(j.gpus))).join(', ');
        const m = el('button', Object.assign(domainAttrs(k, 'mini'), { type: 'button',
          title: k.tier + ' ' + k.name + ': ' + fmt(num(kg.allocated)) + ' of ' + fmt(num(kg.total)) + ' GPUs used, ' + fmt(num(kg.free)) + ' free, ' + fmt(num(kg.failed)) + ' failed' +
            (kst ? '\nnodes: ' + kst : '') + (top ? '\njobs: ' + top : '') + (num(k.other_tenants_gpus) ? '\n' + OTHER_LABEL + ': ' + fmt(num(k.other_tenants_gpus)) + ' GPUs' : '') + '\nclick to drill down' }),
          el('span', { class: 'mh' }, el('span', { class: 'nm', text: k.name }), el('span', { class: 'u', text: pct(num(kg.allocated), num(kg.total)).toFixed(0) + '%' })),
          usageBar(k, false),
          kst ? el('span', { class: 'ms warn', text: kst }) : null);
        m.addEventListener('click', () => drillTo(path.concat([k.name])));
        minis.appendChild(m);
      }
      tile.appendChild(minis);
    }
    return tile;
  }
  function jobChips(dm, max) {
    const box = el('div', { class: 'chips' });
    const jobs = dm.jobs || [];
    for (const j of jobs.slice(0, max)) {
      const jj = view.jobsById.get(j.id);
      box.appendChild(el('span', { class: 'chip', 'data-chip-job': j.id, title: jobLabel(j.id) + ' \u00b7 ' + fmt(num(j.gpus)) + ' GPUs here' },
        el('span', { class: 'sw', style: { backgroundColor: jobColor(j.id) } }),
        el('span', { class: 't', text: '#' + j.id + (jj && jj.name ? ' ' + str(jj.name) : '') }), el('span', { class: 'muted', text: fmt(num(j.gpus)) })));
    }
    const more = num(dm.job_count) - Math.min(jobs.length, max);
    if (more > 0) box.appendChild(el('span', { class: 'muted', text: '+' + fmt(more) + ' more' }));
    if (num(dm.other_tenants_gpus)) box.appendChild(el('span', { class: 'chip' }, el('span', { class: 'sw oth' }), el('span', { class: 't', text: OTHER_LABEL }), el('span', { class: 'muted', text: fmt(num(dm.other_tenants_gpus)) })));
    if (!box.childNodes.length) box.appendChild(el('span', { class: 'muted', text: 'no jobs' }));
    return box;
  }

  function renderLegend(jobCounts, otherGpus) {
    const lg = $('legend');
    const items = [
      el('span', { class: 'item' }, el('span', { class: 'sw' }), 'free'),
      el('span', { class: 'item' }, el('span', { class: 'sw oth' }), OTHER_LABEL),
      el('span', { class: 'item' }, el('span', { class: 'sw deg' }), 'degraded GPU'),
      el('span', { class: 'item' }, el('span', { class: 'sw fail' }), 'failed GPU'),
      el('span', { class: 'item' }, el('span', { class: 'sw ns' }), 'node down / drained / suspect'),
      el('span', { class: 'item' }, el('span', { class: 'sw drn' }), 'node draining'),
      el('span', { class: 'item muted', text: 'hover for details; click a job to highlight it' }),
    ];
    const jobsEl = el('div', { class: 'jobs' });
    for (const [id, c] of jobCounts.slice(0, MAX_LEGEND_JOBS)) {
      const j = view.jobsById.get(id);
      const b = el('button', { type: 'button', 'data-legend-job': id, class: view.highlight === id ? 'on' : '', title: jobLabel(id) + ' \u00b7 ' + fmt(c) + ' GPUs' },
        el('span', { class: 'sw', style: { backgroundColor: jobColor(id) } }),
        el('span', { class: 't', text: '#' + id + (j && j.name ? ' ' + str(j.name) : '') }),
        el('span', { class: 'muted', text: fmt(c) }));
      b.addEventListener('click', () => toggleHighlight(id));
      jobsEl.appendChild(b);
    }
    if (jobCounts.length > MAX_LEGEND_JOBS) jobsEl.appendChild(el('span', { class: 'muted', text: '+' + fmt(jobCounts.length - MAX_LEGEND_JOBS) + ' more jobs' }));
    if (otherGpus > 0) jobsEl.appendChild(el('span', { class: 'item' }, el('span', { class: 'sw oth' }), OTHER_LABEL + ' \u00b7 ' + fmt(otherGpus) + ' GPUs'));
    if (!jobCounts.length && !otherGpus) jobsEl.appendChild(el('span', { class: 'muted', text: 'no job holds GPUs here' }));
    lg.replaceChildren(...items, jobsEl);
  }
  function toggleHighlight(id) {
    view.highlight = view.highlight === id ? null : id;
    applyHighlight();
    for (const b of document.querySelectorAll('[data-legend-job]')) b.classList.toggle('on', Number(b.getAttribute('data-legend-job')) === view.highlight);
    for (const tr of document.querySelectorAll('#running-table tr[data-job-id]')) tr.classList.toggle('sel', Number(tr.getAttribute('data-job-id')) === view.highlight);
  }
  function applyHighlight() {
    const map = $('map'), id = view.highlight;
    map.classList.toggle('hl', id !== null);
    if (id === null) { for (const c of map.querySelectorAll('.hl-on')) c.classList.remove('hl-on'); return; }
    const s = String(id);
    for (const c of map.querySelectorAll('.gpu')) c.classList.toggle('hl-on', c.getAttribute('data-job') === s);
    for (const c of map.querySelectorAll('.tile, .mini')) c.classList.toggle('hl-on', (' ' + c.getAttribute('data-jobs') + ' ').includes(' ' + s + ' '));
  }

  // ---------- tenants ----------
  function renderTenants(d, err) {
    const tb = $('tenants-table').tBodies[0];
    if (err) { view.lastTenants = null; tb.replaceChildren(emptyRow(9, 'Tenants are not visible to this role.')); return; }
    const ts = (Array.isArray(d.tenants) ? d.tenants : []).slice().sort((a, b) => str(a.name).localeCompare(str(b.name)));
    view.lastTenants = ts;
    updateTenantFilter();
    $('tenants-caption').textContent = plural(ts.length, 'tenant');
    const names = new Set(ts.map((t) => str(t.name)));
    const rows = ts.map((t) => {
      const name = str(t.name), cut = name.lastIndexOf('/');
      // indent under the parent only when the parent is listed too
      const depth = cut > 0 && names.has(name.slice(0, cut)) ? name.split('/').length - 1 : 0;
      // usage_gpus includes the sub-tenants' (GET /v1/tenants); own_usage_gpus is its own
      const usage = num(t.usage_gpus), guar = num(t.guaranteed_gpus);
      const own = t.own_usage_gpus === undefined ? usage : num(t.own_usage_gpus);
      const scale = Math.max(usage, guar, 1);
      const inUse = own === usage ? usage + ' GPUs in use'
        : usage + ' GPUs in use with its sub-tenants (' + own + ' its own)';
      const bar = el('span', { class: 'bar', title: inUse + ', ' + guar + ' guaranteed' },
        el('span', { class: 'fill' + (usage > guar ? ' over' : ''), style: { width: pct(usage, scale).toFixed(1) + '%' } }),
        guar > 0 ? el('span', { class: 'mark', style: { left: 'calc(' + pct(guar, scale).toFixed(1) + '% - 1px)' } }) : null);
      const leafName = depth ? name.slice(name.lastIndexOf('/') + 1) : name;
      return el('tr', { 'data-tenant': name, 'data-usage': usage, 'data-own': own },
        el('td', { title: name }, el('span', { style: { paddingLeft: (depth * 14) + 'px' }, text: depth ? '\u2514 ' + leafName : name })),
        el('td', null, bar, el('span', { class: 'bartext', text: fmt(usage) + ' / ' + fmt(guar) + (own === usage ? '' : ' (own ' + fmt(own) + ')') })),
        el('td', { class: 'num', text: fmt(t.guaranteed_gpus) }),
        el('td', { class: 'num', text: t.borrow_limit_gpus === -1 ? 'no limit' : fmt(t.borrow_limit_gpus) }),
        el('td', { class: 'num', text: t.max_job_gpus === 0 ? '\u2014' : fmt(t.max_job_gpus) }),
        el('td', { class: 'num', text: t.max_running_jobs === 0 ? '\u2014' : fmt(t.max_running_jobs) }),
        el('td', { class: 'num', text: fmt(t.shares) }),
        el('td', { class: 'num', text: fmt(t.running_jobs) }),
        el('td', { class: 'num', text: fmt(t.queued_jobs) }));
    });
    if (!rows.length) rows.push(emptyRow(9, 'No tenants.'));
    tb.replaceChildren(...rows);
  }

  // ---------- utilization chart ----------
  const CH = { w: 640, h: 210, l: 42, r: 12, t: 10, b: 26 };
  let utilSamples = [];
  function renderUtil(d, err) {
    const box = $('util');
    if (err) { box.replaceChildren(el('div', { class: 'muted', text: 'Utilization is not visible to this role.' })); $('util-readout').textContent = ''; return; }
    const s = (Array.isArray(d.samples) ? d.samples : []).filter((x) => x && typeof x.time_ms === 'number')
      .slice().sort((a, b) => a.time_ms - b.time_ms);
    utilSamples = s;
    if (!s.length) { box.replaceChildren(el('div', { class: 'muted', text: 'No samples yet (the daemon takes one a minute).' })); $('util-readout').textContent = ''; return; }
    const x0 = s[0].time_ms, x1 = Math.max(s[s.length - 1].time_ms, x0 + 60000);
    const pw = CH.w - CH.l - CH.r, ph = CH.h - CH.t - CH.b;
    const X = (t) => CH.l + (t - x0) / (x1 - x0) * pw;
    const Y = (p) => CH.t + (1 - p / 100) * ph;
    const P = (x) => Math.max(0, Math.min(100, pct(num(x.allocated), num(x.total))));
    const root = svg('svg', { viewBox: '0 0 ' + CH.w + ' ' + CH.h, role: 'img', 'aria-label': 'GPU utilization over time', 'data-samples': s.length });
    const grid = svg('g', { class: 'grid' }), axis = svg('g', { class: 'axis' });
    for (const p of [0, 25, 50, 75, 100]) {
      grid.appendChild(svg('line', { x1: CH.l, x2: CH.w - CH.r, y1: Y(p), y2: Y(p) }));
      axis.appendChild(svg('text', { x: CH.l - 6, y: Y(p) + 3, 'text-anchor': 'end', text: p + '%' }));
    }
    const span = x1 - x0, ticks = 6;
    for (let i = 0; i <= ticks; i++) {
      const t = x0 + span * i / ticks, d2 = new Date(t);
      const lbl = String(d2.getHours()).padStart(2, '0') + ':' + String(d2.getMinutes()).padStart(2, '0');
      axis.appendChild(svg('text', { x: X(t), y: CH.h - 8, 'text-anchor': i === 0 ? 'start' : i === ticks ? 'end' : 'middle', text: lbl }));
      grid.appendChild(svg('line', { x1: X(t), x2: X(t), y1: CH.t, y2: CH.t + ph }));
    }
    let line = '';
    s.forEach((x, i) => { line += (i ? 'L' : 'M') + X(x.time_ms).toFixed(1) + ' ' + Y(P(x)).toFixed(1); });
    const area = line + 'L' + X(s[s.length - 1].time_ms).toFixed(1) + ' ' + Y(0) + 'L' + X(s[0].time_ms).toFixed(1) + ' ' + Y(0) + 'Z';
    const cursor = svg('line', { class: 'cursor', y1: CH.t, y2: CH.t + ph, x1: -10, x2: -10 });
    const dot = svg('circle', { r: 3, cx: -10, cy: -10, fill: '#2563eb' });
    append(root, grid, axis, svg('path', { class: 'area', d: area }), svg('path', { class: 'line', d: line }), cursor, dot);
    if (s.length === 1) append(root, svg('circle', { r: 3, cx: X(s[0].time_ms), cy: Y(P(s[0])), fill: '#2563eb' }));
    const hit = svg('rect', { x: CH.l, y: CH.t, width: pw, height: ph, fill: 'transparent' });
    root.appendChild(hit);
    const readout = (x) => {
      $('util-readout').textContent = fmtTime(x.time_ms) + ' \u00b7 ' + P(x).toFixed(1) + ' % \u00b7 ' + fmt(x.allocated) + ' of ' + fmt(x.total) + ' GPUs allocated';
    };
    const last = s[s.length - 1];
    hit.addEventListener('mousemove', (ev) => {
      const r = root.getBoundingClientRect();
      const vx = (ev.clientX - r.left) / r.width * CH.w;
      const t = x0 + (vx - CH.l) / pw * (x1 - x0);
      let lo = 0, hi = s.length - 1;
      while (lo < hi) { const m = (lo + hi) >> 1; if (s[m].time_ms < t) lo = m + 1; else hi = m; }
      if (lo > 0 && Math.abs(s[lo - 1].time_ms - t) < Math.abs(s[lo].time_ms - t)) lo--;
      const x = s[lo];
      cursor.setAttribute('x1', X(x.time_ms)); cursor.setAttribute('x2', X(x.time_ms));
      dot.setAttribute('cx', X(x.time_ms)); dot.setAttribute('cy', Y(P(x)));
      readout(x);
    });
    hit.addEventListener('mouseleave', () => { cursor.setAttribute('x1', -10); cursor.setAttribute('x2', -10); dot.setAttribute('cx', -10); readout(last); });
    box.replaceChildren(root);
    readout(last);
  }

  // ---------- wiring ----------
  $('login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = $('login-token').value.trim();
    if (!t) { $('login-message').textContent = 'Enter a token.'; return; }
    signIn(t);
  });
  $('refresh-btn').addEventListener('click', () => { if (!inFlight) refresh(); });
  $('signout-btn').addEventListener('click', () => showLogin('Signed out.'));
  $('tenant-filter').addEventListener('change', drawJobTables);
  window.addEventListener('hashchange', () => { const t = takeTokenFromFragment(); if (t) signIn(t); });
  document.addEventListener('visibilitychange', () => { if (!document.hidden && token && !inFlight && timer === null) refresh(); });

  const fromFragment = takeTokenFromFragment();
  const initial = fromFragment || loadToken();
  if (initial) signIn(initial); else showLogin('');
