// Drives the unmodified node-nats-streaming client against a streaming server.
// usage: node driver.js <scenario> <nats url> <cluster id> <client id> [args...]
// Prints one JSON object with what happened; exits 0 unless the scenario itself failed.
'use strict'
const stan = require('node-nats-streaming')

const [scenario, url, clusterID, clientID, ...rest] = process.argv.slice(2)

function connect (id) {
  return new Promise((resolve, reject) => {
    const sc = stan.connect(clusterID, id || clientID, { url, connectTimeout: 5000 })
    sc.once('connect', () => resolve(sc))
    sc.once('error', reject)
  })
}

function close (sc) {
  return new Promise((resolve) => {
    sc.once('close', () => resolve())
    sc.close()
  })
}

function publish (sc, subject, data) {
  return new Promise((resolve, reject) => {
    sc.publish(subject, data, (err, guid) => (err ? reject(err) : resolve(guid)))
  })
}

function subscribe (sc, subject, qGroup, opts) {
  return new Promise((resolve, reject) => {
    const sub = qGroup ? sc.subscribe(subject, qGroup, opts) : sc.subscribe(subject, opts)
    sub.received = []
    sub.waiters = []
    sub.on('message', (m) => {
      sub.received.push(m)
      sub.waiters = sub.waiters.filter((w) => !w())
    })
    sub.once('ready', () => resolve(sub))
    sub.once('error', reject)
    sub.once('timeout', reject)
  })
}

function waitCount (sub, n, ms = 10000) {
  return new Promise((resolve, reject) => {
    const check = () => {
      if (sub.received.length >= n) { resolve(sub.received.slice(0, n)); return true }
      return false
    }
    if (check()) return
    sub.waiters.push(check)
    setTimeout(() => reject(new Error(`timeout waiting for ${n} messages, got ${sub.received.length}`)), ms)
  })
}

const info = (m) => ({
  seq: m.getSequence(),
  data: m.getData(),
  redelivered: m.isRedelivered(),
  count: m.getRedeliveryCount ? m.getRedeliveryCount() : undefined
})

const scenarios = {
  // publish with acks; subscriptions with every start position
  async pubsub () {
    const sc = await connect()
    const guids = []
    for (let i = 0; i < 10; i++) guids.push(await publish(sc, 'node.pubsub', `m${i}`))
    const o = () => sc.subscriptionOptions()
    const subs = {
      all: await subscribe(sc, 'node.pubsub', null, o().setDeliverAllAvailable()),
      last: await subscribe(sc, 'node.pubsub', null, o().setStartWithLastReceived()),
      seq: await subscribe(sc, 'node.pubsub', null, o().setStartAtSequence(7)),
      delta: await subscribe(sc, 'node.pubsub', null, o().setStartAtTimeDelta(60 * 60 * 1000)),
      time: await subscribe(sc, 'node.pubsub', null, o().setStartTime(new Date(Date.now() + 3600 * 1000))),
      newOnly: await subscribe(sc, 'node.pubsub', null, o())
    }
    await publish(sc, 'node.pubsub', 'm10')
    const counts = { all: 11, last: 2, seq: 5, delta: 11, time: 1, newOnly: 1 }
    const out = { guids: guids.length, unique: new Set(guids).size, subs: {} }
    for (const [k, sub] of Object.entries(subs)) {
      out.subs[k] = (await waitCount(sub, counts[k])).map((m) => m.getSequence())
    }
    out.first = info(subs.all.received[0])
    await close(sc)
    return out
  },

  // async publishing with many acks in flight
  async burst () {
    const sc = await connect()
    const n = parseInt(rest[0] || '5000')
    let acked = 0; let errors = 0
    await new Promise((resolve) => {
      for (let i = 0; i < n; i++) {
        sc.publish('node.burst', `b${i}`, (err) => {
          if (err) errors++; else acked++
          if (acked + errors === n) resolve()
        })
      }
    })
    await close(sc)
    return { acked, errors }
  },

  // a durable: receive, ack some, close the connection; come back and resume
  async durableFirst () {
    const sc = await connect()
    for (let i = 1; i <= 5; i++) await publish(sc, 'node.durable', `d${i}`)
    const opts = sc.subscriptionOptions().setDurableName('nodedur').setDeliverAllAvailable()
      .setManualAckMode(true).setAckWait(30 * 1000)
    const sub = await subscribe(sc, 'node.durable', null, opts)
    const got = await waitCount(sub, 5)
    got.slice(0, 3).forEach((m) => m.ack())
    await publish(sc, 'node.durable', 'after-acks') // a round trip after the acks
    await close(sc)
    return { got: got.map((m) => m.getSequence()) }
  },
  async durableResume () {
    const sc = await connect()
    const opts = sc.subscriptionOptions().setDurableName('nodedur').setDeliverAllAvailable()
      .setManualAckMode(true)
    const sub = await subscribe(sc, 'node.durable', null, opts)
    const got = await waitCount(sub, 3)
    got.forEach((m) => m.ack())
    await close(sc)
    return { got: got.map(info) }
  },

  // a queue group of two members in two connections
  async queue () {
    const a = await connect(clientID + '-a')
    const b = await connect(clientID + '-b')
    const qa = await subscribe(a, 'node.queue', 'workers', a.subscriptionOptions())
    const qb = await subscribe(b, 'node.queue', 'workers', b.subscriptionOptions())
    for (let i = 0; i < 40; i++) await publish(a, 'node.queue', `q${i}`)
    const deadline = Date.now() + 10000
    while (qa.received.length + qb.received.length < 40 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
    const out = { a: qa.received.map((m) => m.getSequence()), b: qb.received.map((m) => m.getSequence()) }
    await close(a)
    await close(b)
    return out
  },

  // no ack within the ack wait: redelivered, flagged, counted
  async redelivery () {
    const sc = await connect()
    const opts = sc.subscriptionOptions().setManualAckMode(true).setAckWait(1000)
    const sub = await subscribe(sc, 'node.redeliver', null, opts)
    await publish(sc, 'node.redeliver', 'again')
    const got = await waitCount(sub, 3, 15000)
    got[2].ack()
    await close(sc)
    return { got: got.map(info) }
  },

  // the error strings reach the application unchanged
  async errors () {
    const out = {}
    const sc = await connect()
    try {
      await connect()
    } catch (e) { out.duplicate = e && e.message !== undefined ? e.message : String(e) }
    const o = sc.subscriptionOptions().setDurableName('a:b')
    try {
      await subscribe(sc, 'node.err', 'grp', o)
    } catch (e) { out.durableQueueName = e.message }
    try {
      await subscribe(sc, 'node.err.*', null, sc.subscriptionOptions())
    } catch (e) { out.wildcard = e.message }
    await close(sc)
    return out
  },

  // interop: read what another client published
  // publish n0, n1, ... one at a time for <seconds>, through server failovers: a publish
  // not acknowledged within a second is recorded as failed and not retried
  async publishThrough () {
    const [subject, seconds] = [rest[0], parseFloat(rest[1])]
    const sc = await new Promise((resolve, reject) => {
      const c = stan.connect(clusterID, clientID, { url, connectTimeout: 5000, ackTimeout: 1000 })
      c.once('connect', () => resolve(c))
      c.once('error', reject)
    })
    const failed = []
    const end = Date.now() + seconds * 1000
    let i = 0
    for (; Date.now() < end; i++) {
      try {
        await publish(sc, subject, `n${i}`)
      } catch (err) {
        failed.push(i)
      }
    }
    await close(sc)
    return { published: i, failed } // acknowledged: n0 .. n<published - 1> but the failed
  },

  async read () {
    const sc = await connect()
    const sub = await subscribe(sc, rest[0], null, sc.subscriptionOptions().setDeliverAllAvailable())
    const got = await waitCount(sub, parseInt(rest[1]))
    await publish(sc, rest[0], 'from node')
    await close(sc)
    return { got: got.map((m) => m.getData()) }
  }
}

const timer = setTimeout(() => { console.error('driver timeout'); process.exit(3) }, 60000)
scenarios[scenario]().then((out) => {
  clearTimeout(timer)
  process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(0))
}, (err) => {
  clearTimeout(timer)
  console.error(err && err.stack ? err.stack : err)
  process.exit(1)
})
