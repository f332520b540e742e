/* Keep the Python thread state of a gRPC thread from one Flight call to the next.
 *
 * pyarrow enters Python from gRPC's threads with PyGILState_Ensure and leaves with
 * PyGILState_Release. A thread that Python did not start has no thread state of its own, so
 * every callback (the auth check, the middleware's start and end, the handler, each batch a
 * DoGet pulls) creates one and deletes it again: an allocation, a 16 KiB frame stack mapped
 * and unmapped, the interpreter's thread list locked twice. That was a third of a
 * GetFlightInfo's server CPU.
 *
 * `pin()` takes one more PyGILState reference for the calling thread, so its state outlives
 * the callback and later ones reuse it. When the thread exits (gRPC retires idle threads), a
 * thread-specific key's destructor hands the state over to be deleted: it must not wait for
 * the GIL there, since whoever holds it may be joining that very thread (a server being
 * destroyed). The next `pin()`, which holds the GIL, deletes the states so handed over, if
 * they are still there: a thread Python started deletes its own state on exit, and the
 * state's unique id tells a new state at the same address from the one pinned.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdlib.h>

typedef struct Retired {
    PyThreadState *state;
    uint64_t id; /* the state's unique id in its interpreter */
    struct Retired *next;
} Retired;

static pthread_key_t pinned_key;
static pthread_mutex_t retired_lock = PTHREAD_MUTEX_INITIALIZER;
static Retired *retired; /* states of exited threads, to delete under the GIL */
static volatile int any_retired;

/* Thread exit (no GIL, and none to be waited for): hand the pinned state over. */
static void retire(void *pinned)
{
    Retired *r = pinned;
    pthread_mutex_lock(&retired_lock);
    r->next = retired;
    retired = r;
    any_retired = 1;
    pthread_mutex_unlock(&retired_lock);
}

/* With the GIL: delete the handed-over states that still exist. */
static void reap(void)
{
    pthread_mutex_lock(&retired_lock);
    Retired *list = retired;
    retired = NULL;
    any_retired = 0;
    pthread_mutex_unlock(&retired_lock);
    PyInterpreterState *interp = PyThreadState_GetInterpreter(PyThreadState_Get());
    while (list != NULL) {
        Retired *r = list;
        list = r->next;
        PyThreadState *t = PyInterpreterState_ThreadHead(interp);
        while (t != NULL && !(t == r->state && t->id == r->id))
            t = PyThreadState_Next(t);
        if (t != NULL) {
            PyThreadState_Clear(t);
            PyThreadState_Delete(t);
        }
        free(r);
    }
}

PyDoc_STRVAR(pin_doc, "pin(): keep the calling thread's Python thread state until the thread "
                      "exits, so later calls into Python from it reuse the state.");

static PyObject *pin(PyObject *self, PyObject *unused)
{
    if (any_retired)
        reap();
    if (pthread_getspecific(pinned_key) != NULL)
        Py_RETURN_NONE;
    PyThreadState *state = PyThreadState_Get();
    if (PyGILState_GetThisThreadState() != state)
        Py_RETURN_NONE; /* a state swapped in, not the thread's own: leave it alone */
    Retired *r = malloc(sizeof(Retired));
    if (r == NULL)
        return PyErr_NoMemory();
    r->state = state;
    r->id = state->id;
    r->next = NULL;
    if (pthread_setspecific(pinned_key, r) != 0) {
        free(r);
        return PyErr_NoMemory();
    }
    PyGILState_Ensure(); /* the reference that keeps the state (never given back) */
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"pin", pin, METH_NOARGS, pin_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_threadstate",
    "Python thread states kept for the threads of gRPC (see pin).",
    -1,
    methods,
};

PyMODINIT_FUNC PyInit__threadstate(void)
{
    if (pthread_key_create(&pinned_key, retire) != 0)
        return PyErr_NoMemory();
    return PyModule_Create(&module);
}
