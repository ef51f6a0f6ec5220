/* The sys.setprofile core's first filter, compiled (Python 3.11).
 *
 * A profile function runs at every Python call, return and C call of its thread, about
 * 130 times per launch, and a Python one pays for a frame, and for a copy of the locals
 * of the profiled frame, at each. `install(profile)` installs the core's Python profile
 * function behind a C function that passes on only what it would act on: a "call" event
 * of a code object whose qualified name is watched, or any event once the hook is closing
 * (its code swapped, see pyprofile._close). The Python function is the profile object,
 * so `sys.getprofile()` returns it, as after `sys.setprofile(profile)`, and everything
 * that tells our hook from another's works the same way.
 *
 * Where the Python function raises, CPython's own trampoline removes the profile function
 * (a strict guard's refusal relies on that): this one does the same.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>

static PyObject *watched_names; /* pyprofile._watched_names: the set, updated in place */
static PyObject *closing_code;  /* pyprofile._CLOSING: a hook taking itself down */
static PyObject *event_names[8]; /* by PyTrace_* number, as a Python profile function */

static PyObject *
pass_on(PyObject *profile, PyFrameObject *frame, int what, PyObject *arg)
{
    PyObject *args[3] = {(PyObject *)frame, event_names[what], arg == NULL ? Py_None : arg};
    return PyObject_Vectorcall(profile, args, 3, NULL);
}

static int
wanted(PyObject *profile, PyFrameObject *frame, int what)
{
    if (PyFunction_Check(profile) && PyFunction_GET_CODE(profile) == closing_code) {
        return 1;
    }
    if (what != PyTrace_CALL) {
        return 0;
    }
    PyCodeObject *code = PyFrame_GetCode(frame);
    /* Only Warp's code is watched, whose names are plain strs: a str subclass's (code a
     * program made with one) is not hashed, which would run its own __hash__. */
    int found = PyUnicode_CheckExact(code->co_qualname)
                    ? PySet_Contains(watched_names, code->co_qualname) : 0;
    Py_DECREF(code);
    if (found < 0) {  /* ours alone (no memory): the Python function tests again */
        PyErr_Clear();
        return 1;
    }
    return found;
}

static int
trampoline(PyObject *profile, PyFrameObject *frame, int what, PyObject *arg)
{
    if (what < 0 || what >= (int)(sizeof(event_names) / sizeof(event_names[0]))) {
        return 0;
    }
    if (!wanted(profile, frame, what)) {
        return 0;
    }
    PyObject *result = pass_on(profile, frame, what, arg);
    if (result != NULL) {
        Py_DECREF(result);
        return 0;
    }
    /* As CPython's trampoline for sys.setprofile: a profile function that raises is
     * removed. */
    _PyEval_SetProfile(PyThreadState_Get(), NULL, NULL);
    return -1;
}

static PyObject *
fastprofile_install(PyObject *module, PyObject *profile)
{
    if (watched_names == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "install() before watch()");
        return NULL;
    }
    if (!PyCallable_Check(profile)) {
        PyErr_Format(PyExc_TypeError, "install(profile): not callable: %R", profile);
        return NULL;
    }
    if (_PyEval_SetProfile(PyThreadState_Get(), trampoline, profile) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
fastprofile_watch(PyObject *module, PyObject *args)
{
    PyObject *names, *closing;
    if (!PyArg_ParseTuple(args, "O!O!:watch", &PySet_Type, &names, &PyCode_Type, &closing)) {
        return NULL;
    }
    Py_XSETREF(watched_names, Py_NewRef(names));
    Py_XSETREF(closing_code, Py_NewRef(closing));
    Py_RETURN_NONE;
}

static PyMethodDef fastprofile_methods[] = {
    {"watch", fastprofile_watch, METH_VARARGS,
     PyDoc_STR("watch(names, closing): the set of watched qualified names (read at each "
               "call, updated in place by its owner) and the code of a closing hook.")},
    {"install", fastprofile_install, METH_O,
     PyDoc_STR("install(profile): make `profile` this thread's profile function, called "
               "for the events watch() names alone.")},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastprofile_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "trackgen_contract.tracer._fastprofile",
    .m_doc = PyDoc_STR("The sys.setprofile core's first filter, compiled."),
    .m_size = -1,
    .m_methods = fastprofile_methods,
};

PyMODINIT_FUNC
PyInit__fastprofile(void)
{
    static const char *names[] = {
        "call", "exception", "line", "return", "c_call", "c_exception", "c_return", "opcode",
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (event_names[i] == NULL && (event_names[i] = PyUnicode_InternFromString(names[i])) == NULL) {
            return NULL;
        }
    }
    return PyModule_Create(&fastprofile_module);
}
