  // ---------- partitions and reservations ----------
  // GET /v1/partitions and GET /v1/reservations (docs/api.md): a table of the partitions and a
  // timeline of the reservations from now to the last one's end (at least a day), a bar each:
  // .resv[data-reservation][data-state][data-maintenance], planned ones hatched, maintenance
  // ones in the warning colour.
  function fmtSeconds(s) {
    if (!s) return '\u2014';
    if (s % 86400 === 0) return (s / 86400) + ' d';
    if (s % 3600 === 0) return (s / 3600) + ' h';
    if (s % 60 === 0) return (s / 60) + ' min';
    return s + ' s';
  }
  function renderPartitions(d, err) {
    const tb = $('partitions-table').tBodies[0];
    if (err) { tb.replaceChildren(emptyRow(9, 'Partitions are not visible to this role.')); return; }
    const ps = (Array.isArray(d.partitions) ? d.partitions : []).slice()
      .sort((a, b) => num(b.priority_tier) - num(a.priority_tier) || str(a.name).localeCompare(str(b.name)));
    $('partitions-caption').textContent = ps.length ? plural(ps.length, 'partition') : 'none: every node takes every job';
    const rows = ps.map((p) => el('tr', { 'data-partition': str(p.name), 'data-free-gpus': num(p.free_gpus), 'data-gpus': num(p.gpus) },
      el('td', { title: str(p.nodes) }, str(p.name), p.default ? el('span', { class: 'badge', text: 'default' }) : null),
      el('td', { class: 'num', text: fmt(p.node_count) }),
      el('td', { class: 'num', text: fmt(p.up_nodes) }),
      el('td', { class: 'num', text: fmt(p.free_gpus) + ' / ' + fmt(p.gpus) }),
      el('td', { class: 'num', text: fmt(p.priority_tier) }),
      el('td', { text: p.preemptible ? 'yes' : 'no' }),
      el('td', { class: 'num', text: fmtSeconds(num(p.max_time_s)) }),
      el('td', { class: 'num', text: p.max_gpus ? fmt(p.max_gpus) : '\u2014' }),
      el('td', { class: 'name', text: Array.isArray(p.tenants) && p.tenants.length ? p.tenants.join(', ') : 'all' })));
    if (!ps.length) rows.push(emptyRow(9, 'No partitions.'));
    tb.replaceChildren(...rows);
  }
  function renderReservations(d, err) {
    const box = $('reservations');
    if (err) { box.replaceChildren(el('div', { class: 'muted', text: 'Reservations are not visible to this role.' })); return; }
    const rs = (Array.isArray(d.reservations) ? d.reservations : []).slice()
      .sort((a, b) => num(a.start_ms) - num(b.start_ms) || str(a.name).localeCompare(str(b.name)));
    $('reservations-caption').textContent = rs.length ? plural(rs.length, 'reservation') : 'none';
    if (!rs.length) { box.replaceChildren(el('div', { class: 'muted', text: 'No reservations.' })); return; }
    const now = Date.now();
    const end = Math.max(now + 86400000, ...rs.map((r) => num(r.end_ms)));
    const span = Math.max(1, end - now);
    const at = (t) => Math.min(100, Math.max(0, 100 * (t - now) / span));
    const rows = rs.map((r) => {
      const left = at(num(r.start_ms)), right = at(num(r.end_ms));
      const when = new Date(num(r.start_ms)).toISOString().replace('.000Z', 'Z') + ' \u2192 ' +
        new Date(num(r.end_ms)).toISOString().replace('.000Z', 'Z');
      const who = Array.isArray(r.tenants) && r.tenants.length ? r.tenants.join(', ') : 'any tenant';
      const title = str(r.name) + ': ' + fmt(r.node_count) + ' nodes (' + fmt(r.gpus) + ' GPUs) ' + str(r.nodes) +
        ', ' + when + ', ' + str(r.state) + (r.maintenance ? ', maintenance' : ', for ' + who);
      return el('div', { class: 'resv-row' },
        el('div', { class: 'resv-name', title: title, text: str(r.name) }),
        el('div', { class: 'resv-track' },
          el('div', { class: 'resv' + (r.maintenance ? ' maint' : '') + (r.state === 'planned' ? ' planned' : ''),
            'data-reservation': str(r.name), 'data-state': str(r.state), 'data-maintenance': r.maintenance ? '1' : '0',
            title: title, style: { left: left.toFixed(2) + '%', width: Math.max(0.5, right - left).toFixed(2) + '%' } })),
        el('div', { class: 'resv-when muted', text: fmt(r.gpus) + ' GPUs \u00b7 ' + (r.state === 'active' ? 'ends ' + fmtTime(num(r.end_ms)) : 'starts ' + fmtTime(num(r.start_ms))) }));
    });
    const axis = el('div', { class: 'resv-row resv-axis muted' }, el('div', { class: 'resv-name', text: '' }),
      el('div', { class: 'resv-track', text: 'now \u2192 ' + new Date(end).toISOString().slice(0, 16).replace('T', ' ') + ' UTC' }),
      el('div', { class: 'resv-when', text: '' }));
    box.replaceChildren(axis, ...rows);
  }
