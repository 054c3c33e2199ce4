// Drives the unmodified @nats-io/jwt library for tests/unit/config/test_jwt.py.
// Reads one JSON request on stdin, prints one JSON answer on stdout:
//   {"op": "mint"}                      -> keys (seeds, public keys), tokens, a creds file
//   {"op": "decode", "tokens": [...]}   -> per token {ok, payload} or {ok: false, error}
//   {"op": "parseCreds", "creds": "..."} -> {jwt, key}
'use strict'
const jwt = require('@nats-io/jwt')

const td = new TextDecoder()

function keys () {
  const made = {
    operator: jwt.createOperator(),
    opSigner: jwt.createOperator(),
    system: jwt.createAccount(),
    account: jwt.createAccount(),
    accSigner: jwt.createAccount(),
    scopedSigner: jwt.createAccount(),
    exporter: jwt.createAccount(),
    user: jwt.createUser(),
    scopedUser: jwt.createUser(),
    v1User: jwt.createUser()
  }
  const out = {}
  for (const [name, kp] of Object.entries(made)) {
    out[name] = { kp, seed: td.decode(kp.getSeed()), pub: kp.getPublicKey() }
  }
  return out
}

async function mint () {
  const k = keys()
  const now = Math.floor(Date.now() / 1000)
  const tokens = {}
  tokens.operator = await jwt.encodeOperator('OP', k.operator.kp, {
    signing_keys: [k.opSigner.pub],
    system_account: k.system.pub,
    account_server_url: 'http://127.0.0.1:9090/jwt/v1',
    operator_service_urls: ['nats://127.0.0.1:4222']
  })
  const scope = jwt.newScopedSigner(k.scopedSigner.kp, 'admin', {
    pub: { allow: ['scoped.>'], deny: [] },
    sub: { allow: ['_INBOX.>'], deny: [] },
    subs: 10
  })
  tokens.account = await jwt.encodeAccount('ACC', k.account.kp, {
    limits: { subs: 100, data: 1000000, payload: 4096, imports: 5, exports: 5, wildcards: true, conn: 10, leaf: 2, mem_storage: 1024, disk_storage: -1 },
    exports: [
      { name: 'svc', subject: 'help.>', type: 'service', response_type: 'Stream', response_threshold: 2000000000, service_latency: { sampling: 'headers', results: 'lat.results' } },
      { name: 'feed', subject: 'feed.*', type: 'stream', token_req: true, revocations: { [k.exporter.pub]: now }, account_token_position: 2 }
    ],
    imports: [
      { name: 'other', subject: 'other.>', account: k.exporter.pub, type: 'stream', local_subject: 'mine.>' },
      { name: 'otherSvc', subject: 'q', account: k.exporter.pub, type: 'service', share: true }
    ],
    signing_keys: [k.accSigner.pub, scope],
    revocations: { [k.user.pub]: now - 10, '*': now - 100 },
    default_permissions: { pub: { allow: ['dp.>'], deny: ['dp.no'] }, sub: { deny: ['x'] } },
    description: 'an account',
    info_url: 'https://example.com/acc',
    tags: ['Blue']
  }, { signer: k.opSigner.kp, exp: now + 3600 })
  tokens.user = await jwt.encodeUser('U', k.user.kp, k.account.kp, {
    pub: { allow: ['a.>', 'b'], deny: ['a.secret'] },
    sub: { allow: ['a.>', 'q.* workers'], deny: [] },
    resp: { max: 3, ttl: 5000000000 },
    src: ['127.0.0.0/8', '10.1.0.0/16'],
    times: [{ start: '08:00:00', end: '17:30:00' }, { start: '22:00:00', end: '02:00:00' }],
    times_location: 'Europe/Prague',
    subs: 7,
    data: 2048,
    payload: 512,
    bearer_token: true,
    allowed_connection_types: ['STANDARD', 'WEBSOCKET'],
    tags: ['t1']
  }, { nbf: now - 60, exp: now + 600 })
  tokens.signedByKey = await jwt.encodeUser('SK', k.user.kp, k.account.kp, { sub: { allow: ['s'] } },
    { signer: k.accSigner.kp })
  tokens.scopedUser = await jwt.encodeUser('SCOPED', k.scopedUser.kp, k.account.kp, {},
    { signer: k.scopedSigner.kp, scopedUser: true })
  tokens.v1User = await jwt.encodeUser('V1', k.v1User.kp, k.account.kp, { pub: { allow: ['v1.>'] } },
    { algorithm: jwt.Algorithms.v1 })
  tokens.activation = await jwt.encodeActivation('ACT', k.account.kp, k.exporter.kp, 'stream',
    { subject: 'feed.' + k.account.pub })
  const creds = td.decode(jwt.fmtCreds(tokens.user, k.user.kp))
  const plainKeys = {}
  for (const [name, v] of Object.entries(k)) plainKeys[name] = { seed: v.seed, pub: v.pub }
  return { now, keys: plainKeys, tokens, creds }
}

function decode (tokens) {
  return tokens.map((t) => {
    try {
      return { ok: true, payload: jwt.decode(t) }
    } catch (e) {
      return { ok: false, error: String(e.message || e) }
    }
  })
}

async function main () {
  const chunks = []
  for await (const c of process.stdin) chunks.push(c)
  const req = JSON.parse(Buffer.concat(chunks).toString())
  let out
  if (req.op === 'mint') out = await mint()
  else if (req.op === 'decode') out = decode(req.tokens)
  else if (req.op === 'parseCreds') {
    const { jwt: token, key } = await jwt.parseCreds(new TextEncoder().encode(req.creds))
    out = { jwt: token, key }
  } else throw new Error('unknown op ' + req.op)
  process.stdout.write(JSON.stringify(out) + '\n')
}

main().catch((e) => { console.error(e); process.exit(1) })
