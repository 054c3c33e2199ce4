/*
 * Optional compiled fast path for ClientOpParser (tidings/protocol/parser.py).
 *
 * scan_pubs() walks a run of well-formed "PUB <subject> [reply] <size>\r\n<payload>\r\n"
 * frames (mode 0) and stops at the first byte it is not sure about, leaving everything irregular
 * (other operations, CR inside a line, oversize or incomplete frames, errors) to the
 * pure-Python parser, which stays the reference behaviour. Messages whose subject maps to
 * `empty` in the interest cache (nobody listens) are counted and skipped without creating
 * Python objects for their payloads; every other message is appended to `out` as a
 * (subject, reply_or_None, payload) tuple for the caller to route.
 *
 * On a route it walks the messages of the route's dialect instead: mode 1 the seed's
 * "MSG <subject> <sid> [reply] <size>", mode 2 the reference's "RMSG <account> <subject>
 * [reply] <size>" (no queue list), appending (subject, sid_or_account, reply, payload);
 * there `cache` is the global account's, and skips only messages of the global account `$G`.
 *
 * ws_unmask() undoes a WebSocket client's masking (RFC 6455 5.3) of a frame's payload, or
 * of a piece of it that starts `offset` bytes into the frame (tidings/server/ws_frames.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *
scan_pubs(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, max_payload, max_control_line;
    PyObject *cache, *empty, *out;
    int keep_replies, mode = 0;

    if (!PyArg_ParseTuple(args, "y*nnnO!OpO!|i", &view, &pos, &max_payload, &max_control_line,
                          &PyDict_Type, &cache, &empty, &keep_replies, &PyList_Type, &out,
                          &mode))
        return NULL;

    const char *buf = (const char *)view.buf;
    const Py_ssize_t n = view.len;
    Py_ssize_t dropped = 0, dropped_bytes = 0;
    /* The operation, and the fields before the optional reply: subject (PUB), subject and
     * sid (MSG), account and subject (RMSG). */
    const char *opname = mode == 0 ? "PUB " : mode == 1 ? "MSG " : "RMSG ";
    const Py_ssize_t oplen = (Py_ssize_t)strlen(opname);
    const int lead = mode == 0 ? 1 : 2;
    const int subj = mode == 2 ? 1 : 0;

    while (n - pos >= oplen) {
        if (memcmp(buf + pos, opname, (size_t)oplen) != 0)
            break;
        Py_ssize_t arg_start = pos + oplen;
        Py_ssize_t limit = n - arg_start;
        if (limit > max_control_line + 2)
            limit = max_control_line + 2;
        const char *nl = memchr(buf + arg_start, '\n', (size_t)limit);
        if (nl == NULL)
            break;
        Py_ssize_t eol = nl - buf;
        if (eol - 1 < arg_start || buf[eol - 1] != '\r')
            break;
        Py_ssize_t arg_end = eol - 1;
        if (arg_end - arg_start > max_control_line)
            break;

        /* Up to lead + 2 fields separated by runs of spaces or tabs, as the reference
         * splits them; a CR or LF inside the line goes the slow way. */
        Py_ssize_t fs[4], fe[4];
        int nf = 0, ok = 1;
        Py_ssize_t i = arg_start, start = -1;
        for (; i <= arg_end; i++) {
            char c = (i < arg_end) ? buf[i] : ' ';
            if (c == ' ' || c == '\t') {
                if (start >= 0) {
                    if (nf == lead + 2) { ok = 0; break; }
                    fs[nf] = start; fe[nf] = i; nf++;
                    start = -1;
                }
            } else if (c == '\r' || c == '\n') {
                ok = 0; break;
            } else if (start < 0) {
                start = i;
            }
        }
        if (!ok || nf < lead + 1)
            break;
        Py_ssize_t szs = fs[nf - 1], sze = fe[nf - 1];
        if (sze - szs > 9)
            break;
        Py_ssize_t size = 0;
        for (i = szs; i < sze; i++) {
            char c = buf[i];
            if (c < '0' || c > '9') { ok = 0; break; }
            size = size * 10 + (c - '0');
        }
        if (!ok || size > max_payload)
            break;
        Py_ssize_t pstart = eol + 1, pend = pstart + size;
        if (pend + 2 > n)
            break;
        if (buf[pend] != '\r' || buf[pend + 1] != '\n')
            break;

        PyObject *subject = PyBytes_FromStringAndSize(buf + fs[subj], fe[subj] - fs[subj]);
        if (subject == NULL)
            goto error;
        PyObject *hit = PyDict_GetItemWithError(cache, subject);
        if (hit == NULL && PyErr_Occurred()) {
            Py_DECREF(subject);
            goto error;
        }
        /* On a route, only the global account's messages are judged by the cache (the
         * global account's interest); other accounts' go on to be routed by their own. */
        int judged = mode != 2 || (fe[0] - fs[0] == 2 && buf[fs[0]] == '$' && buf[fs[0] + 1] == 'G');
        if (judged && hit == empty && (nf == lead + 1 || !keep_replies)) {
            Py_DECREF(subject);
            dropped++;
            dropped_bytes += size;
            pos = pend + 2;
            continue;
        }
        PyObject *reply;
        if (nf == lead + 2) {
            reply = PyBytes_FromStringAndSize(buf + fs[lead], fe[lead] - fs[lead]);
            if (reply == NULL) { Py_DECREF(subject); goto error; }
        } else {
            reply = Py_None;
            Py_INCREF(reply);
        }
        PyObject *payload = PyBytes_FromStringAndSize(buf + pstart, size);
        if (payload == NULL) { Py_DECREF(subject); Py_DECREF(reply); goto error; }
        PyObject *op;
        if (mode == 0) {
            op = PyTuple_Pack(3, subject, reply, payload);
        } else {
            int other = 1 - subj; /* the sid (MSG) or the account (RMSG) */
            PyObject *second = PyBytes_FromStringAndSize(buf + fs[other], fe[other] - fs[other]);
            if (second == NULL) {
                Py_DECREF(subject); Py_DECREF(reply); Py_DECREF(payload);
                goto error;
            }
            op = PyTuple_Pack(4, subject, second, reply, payload);
            Py_DECREF(second);
        }
        Py_DECREF(subject);
        Py_DECREF(reply);
        Py_DECREF(payload);
        if (op == NULL)
            goto error;
        int rc = PyList_Append(out, op);
        Py_DECREF(op);
        if (rc < 0)
            goto error;
        pos = pend + 2;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("nnn", pos, dropped, dropped_bytes);

error:
    PyBuffer_Release(&view);
    return NULL;
}

static PyObject *
ws_unmask(PyObject *self, PyObject *args)
{
    Py_buffer data, key;
    Py_ssize_t offset, i = 0, n;
    PyObject *result = NULL;
    unsigned char rotated[8];
    uint64_t wide;

    if (!PyArg_ParseTuple(args, "y*y*n", &data, &key, &offset))
        return NULL;
    if (key.len != 4) {
        PyErr_SetString(PyExc_ValueError, "a masking key has 4 bytes");
        goto done;
    }
    n = data.len;
    result = PyBytes_FromStringAndSize(NULL, n);
    if (result == NULL)
        goto done;
    {
        const unsigned char *src = (const unsigned char *)data.buf;
        const unsigned char *k = (const unsigned char *)key.buf;
        unsigned char *dst = (unsigned char *)PyBytes_AS_STRING(result);

        for (int j = 0; j < 8; j++)
            rotated[j] = k[(offset + j) & 3];
        memcpy(&wide, rotated, 8);
        for (; i + 8 <= n; i += 8) {
            uint64_t chunk;
            memcpy(&chunk, src + i, 8);
            chunk ^= wide;
            memcpy(dst + i, &chunk, 8);
        }
        for (; i < n; i++)
            dst[i] = src[i] ^ rotated[i & 7];
    }
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&key);
    return result;
}

static PyMethodDef methods[] = {
    {"scan_pubs", scan_pubs, METH_VARARGS,
     "scan_pubs(buf, pos, max_payload, max_control_line, cache, empty, keep_replies, out"
     "[, mode]) -> (pos, dropped, dropped_bytes)"},
    {"ws_unmask", ws_unmask, METH_VARARGS,
     "ws_unmask(data, key, offset) -> bytes: data XOR the 4-byte key, from key[offset % 4]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "Optional compiled fast paths: the PUB parser, WebSocket unmasking.", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModule_Create(&module);
}
