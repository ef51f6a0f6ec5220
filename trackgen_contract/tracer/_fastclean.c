/* The sys.monitoring core's PY_START callback, its clean-site and repeat tests compiled.
 *
 * A `CleanFilter` is registered in place of the Python callback (sysmon.py) and answers
 * the two cases that dominate a hot loop: a call at a remembered clean site (fastpath.py),
 * under tracers that let it pass, and, at a site with none, a repeat of a judged breach
 * that the tracer which judged it answers itself (fastpath.answer_repeat). It makes the
 * very tests the Python callback makes, in the same order, on the same tables, reading
 * the slots of fastpath's objects directly (those on a class, a receiver's or one on its
 * path, once for each version of the class: see version_tag), and counts the call or
 * calls the tracer's answer the same way. Anything else, a failed test, a missing or
 * refused answer, an error of its own, goes to the Python callback, which tests again
 * and decides: this
 * file never judges a call, it only spares the interpreter the Python frames of the
 * common ones. A Python callback called from here sees the same frames as one registered
 * directly (a C function has no frame), so `sys._getframe(1)` is still the watched
 * function.
 *
 * No user code runs here that the Python test would not run: dict lookups by str keys
 * (a str subclass key's __eq__, as Python's own lookup), the site's check (a Python
 * function of fastpath's), a counting tracer's `clean_calls`, and a tracer's answer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>

#include "_callerframe.h"

#ifndef Py_T_OBJECT_EX
#define Py_T_OBJECT_EX T_OBJECT_EX
#endif

/* The slots read, by class: their offsets are taken from the classes' member
 * descriptors when a filter is made, and an object is read at them only after its
 * exact type was checked. */
typedef struct {
    Py_ssize_t caller, callee, name, binding, check, counted;
} CleanSlots;

typedef struct {
    Py_ssize_t variable, bound, namespace, attribute, target, module_body;
} BindingSlots;

typedef struct {
    Py_ssize_t cls, mro, changeable, version;
} InstanceSlots;

typedef struct {
    Py_ssize_t name, shadow;
} StepSlots;

typedef struct {
    Py_ssize_t key, variable, from_globals;
} ItemSlots;

typedef struct {
    Py_ssize_t variable, from_globals, module_body, steps;
} PartSlots;

typedef struct {
    Py_ssize_t loads, stream, position, positional, keywords, sequences, mappings;
} SpreadSlots;

typedef struct {
    Py_ssize_t variable, from_globals, module_body, path, attribute, target;
} ReceiverSlots;

typedef struct {
    Py_ssize_t tracers, thread, mine, alone;
} QuietSlots;

typedef struct {
    Py_ssize_t caller, callee, globals, name, op, tracer, binding, check, answer;
} RepeatSlots;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *on_start;  /* the Python callback: every call the filter does not answer */
    PyObject *active;    /* the ContextVar of running tracers */
    PyObject *table;     /* fastpath.table */
    int watched;         /* whether the table is watched for the memo (see clean_site) */
    PyObject *repeats;   /* fastpath.repeats */
    PyObject *last;      /* fastpath.last */
    PyObject *quiet;     /* fastpath.quiet */
    PyObject *counting;  /* fastpath.counting */
    PyObject *by_handler;  /* fastpath.raised_by_handler */
    PyTypeObject *clean_type, *several_type, *binding_type, *receiver_type, *step_type;
    PyTypeObject *item_type, *part_type, *spread_type, *quiet_type, *repeat_type;
    PyObject *binding_holds;  /* Binding.holds: a Spread's `loads` may be it, bound */
    CleanSlots clean;
    BindingSlots binding;
    InstanceSlots instance;  /* of fastpath._Instance: Step's and Receiver's own */
    StepSlots step;
    ItemSlots item;
    PartSlots part;
    SpreadSlots spread;
    ReceiverSlots receiver;
    QuietSlots q;
    RepeatSlots repeat;
    Py_ssize_t several_others, last_now;
    Py_ssize_t dict_scan_limit;  /* fastpath.DICT_SCAN_LIMIT: the largest dict searched */
    PyTypeObject *counter_type;  /* the class whose `clean_calls` slot count() writes */
    PyObject *counter_descr;     /* its member descriptor */
    Py_ssize_t counter_offset;
    unsigned int counter_version;  /* its version tag when the descriptor was last found */
    PyObject *s_name, *s_clean_calls, *s_getattribute, *one;
} CleanFilter;

enum { FULL = 0, ANSWERED = 1, FAILED = -1 };

static int
slot_offset(PyTypeObject *cls, const char *name, Py_ssize_t *offset)
{
    PyObject *descr = PyObject_GetAttrString((PyObject *)cls, name);
    if (descr == NULL) {
        return -1;
    }
    int ok = Py_IS_TYPE(descr, &PyMemberDescr_Type)
             && ((PyMemberDescrObject *)descr)->d_member->type == Py_T_OBJECT_EX;
    if (ok) {
        *offset = ((PyMemberDescrObject *)descr)->d_member->offset;
    }
    Py_DECREF(descr);
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", cls->tp_name, name);
        return -1;
    }
    return 0;
}

static int
get_type(PyObject *module, const char *name, PyTypeObject **out)
{
    PyObject *found = PyObject_GetAttrString(module, name);
    if (found == NULL) {
        return -1;
    }
    if (!PyType_Check(found)) {
        PyErr_Format(PyExc_TypeError, "fastpath.%s is not a class", name);
        Py_DECREF(found);
        return -1;
    }
    *out = (PyTypeObject *)found;
    return 0;
}

/* A slot's value, or NULL where it is unset. */
static inline PyObject *
slot(PyObject *obj, Py_ssize_t offset)
{
    return *(PyObject **)((char *)obj + offset);
}

/* Whether `caller` runs with `globals` as its locals (a module's body: fastpath's
 * _module_body), where LOAD_NAME reads them first. */
static int
module_body(PyFrameObject *caller, PyObject *globals)
{
    PyObject *locals = PyFrame_GetLocals(caller);
    int same = locals != NULL && locals == globals;
    Py_XDECREF(locals);
    return same;
}

/* Whether `binding` still loads the watched function from `globals` (Binding.holds). */
static int
binding_holds(CleanFilter *self, PyObject *binding, PyFrameObject *caller, PyObject *globals)
{
    if (!Py_IS_TYPE(binding, self->binding_type) || !PyDict_CheckExact(globals)) {
        return FULL;
    }
    PyObject *variable = slot(binding, self->binding.variable);
    PyObject *bound = slot(binding, self->binding.bound);
    PyObject *namespace = slot(binding, self->binding.namespace);
    PyObject *in_body = slot(binding, self->binding.module_body);
    if (variable == NULL || bound == NULL || namespace == NULL || in_body == NULL
        || (in_body == Py_True && !module_body(caller, globals))) {
        return FULL;
    }
    if (PyDict_GetItemWithError(globals, variable) != bound) {
        return FULL;
    }
    if (namespace == Py_None) {
        return ANSWERED;
    }
    PyObject *attribute = slot(binding, self->binding.attribute);
    PyObject *target = slot(binding, self->binding.target);
    if (attribute == NULL || target == NULL || !PyModule_CheckExact(bound) ||
        !PyDict_Check(namespace)) {
        return FULL;
    }
    return PyDict_GetItemWithError(namespace, attribute) == target ? ANSWERED : FULL;
}

#if PY_VERSION_HEX >= 0x030C0000
/* Whether `obj` is still an instance of the class `instance` (fastpath._Instance) names,
 * whose MRO is still the one it holds (_Instance.still). Asked again after lookups in a
 * class's or an instance's dict: a stored key of the user's type may run its __eq__ in
 * them, and that may change either. */
static int
still_instance(CleanFilter *self, PyObject *instance, PyObject *obj)
{
    PyObject *cls = slot(instance, self->instance.cls), *mro = slot(instance, self->instance.mro);
    return cls != NULL && mro != NULL && PyType_Check(cls) && (PyObject *)Py_TYPE(obj) == cls
           && ((PyTypeObject *)cls)->tp_mro == mro;
}

/* Whether no class of `instance`'s (fastpath._Instance) that can change has been given a
 * __getattribute__ since: `obj`'s attributes are still found the generic way. */
static int
generic_lookup(CleanFilter *self, PyObject *instance, PyObject *obj)
{
    PyObject *changeable = slot(instance, self->instance.changeable);
    if (changeable == NULL || !PyTuple_CheckExact(changeable)) {
        return 0;
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(changeable); k++) {
        PyObject *klass = PyTuple_GET_ITEM(changeable, k);
        PyObject *space = PyType_Check(klass) ? PyType_GetDict((PyTypeObject *)klass) : NULL;
        int given = space == NULL ? -1 : PyDict_Contains(space, self->s_getattribute);
        Py_XDECREF(space);
        if (given != 0) {
            return 0;
        }
    }
    return still_instance(self, instance, obj);
}

/* `cls`'s version tag, one given to it where it has none yet (0 where CPython has no
 * more to give it). CPython gives a class a new tag at every change made to it or to a
 * base through Python (type_setattro, a new __bases__) and at PyType_Modified, which its
 * C API requires after any other change; its own attribute cache and its specialised
 * attribute loads read a class's attributes by the tag alone. */
static unsigned int
version_tag(PyTypeObject *cls)
{
    if (cls->tp_version_tag == 0) {
        PyUnstable_Type_AssignVersionTag(cls);
    }
    return cls->tp_version_tag;
}

/* Whether the class-level tests of `instance` (fastpath._Instance: its class's namespaces,
 * MRO and lookup, as a Step or a Receiver tests them) passed last under the tag `tag` its
 * class has now: the class is unchanged since, and they would pass again. */
static int
vouched(CleanFilter *self, PyObject *instance, unsigned int tag)
{
    PyObject *seen = slot(instance, self->instance.version);
    return tag != 0 && seen != NULL && PyLong_CheckExact(seen)
           && PyLong_AsUnsignedLongMask(seen) == tag;
}

/* Whether `type`'s MRO holds first under `name` what `shadow` says (fastpath._shadow):
 * `()` for nothing, `(value,)` for that very value. The MRO is held while it is walked:
 * a lookup may run a stored key's __eq__, which may give the class new bases and let go
 * of its old MRO. */
static int
same_shadow(PyTypeObject *type, PyObject *name, PyObject *shadow)
{
    PyObject *mro = type->tp_mro;
    if (mro == NULL || !PyTuple_CheckExact(mro) || !PyTuple_CheckExact(shadow)
        || PyTuple_GET_SIZE(shadow) > 1) {
        return 0;
    }
    Py_INCREF(mro);
    int answer = -1;
    for (Py_ssize_t k = 0; answer < 0 && k < PyTuple_GET_SIZE(mro); k++) {
        PyObject *klass = PyTuple_GET_ITEM(mro, k);
        PyObject *space = PyType_Check(klass) ? PyType_GetDict((PyTypeObject *)klass) : NULL;
        if (space == NULL) {
            answer = 0;
            break;
        }
        PyObject *found = PyDict_GetItemWithError(space, name);
        /* Compared before the dict is let go: nothing runs in between. */
        if (found != NULL) {
            answer = PyTuple_GET_SIZE(shadow) == 1 && found == PyTuple_GET_ITEM(shadow, 0);
        }
        else if (PyErr_Occurred()) {
            answer = 0;
        }
        Py_DECREF(space);
    }
    Py_DECREF(mro);
    return answer < 0 ? PyTuple_GET_SIZE(shadow) == 0 : answer;
}

/* Whether `klass` is `cls` or one of its ancestors through __bases__, found within
 * `*budget` steps (a lattice of diamonds is not walked for ever: past it, no). */
static int
descends(PyTypeObject *cls, PyObject *klass, int *budget)
{
    if ((PyObject *)cls == klass) {
        return 1;
    }
    PyObject *bases = cls->tp_bases;
    if (--*budget < 0 || bases == NULL || !PyTuple_CheckExact(bases)) {
        return 0;
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(bases); k++) {
        PyObject *base = PyTuple_GET_ITEM(bases, k);
        if (PyType_Check(base) && descends((PyTypeObject *)base, klass, budget)) {
            return 1;
        }
    }
    return 0;
}

/* Whether a change to any class in `cls`'s MRO gives `cls` a new tag: each is `cls` or an
 * ancestor through __bases__, and CPython passes a class's changes on to its subclasses.
 * A metaclass's mro() may have put a class there that is not (its mro() since deleted,
 * or the class given another metaclass, the MRO stays): a change to that class leaves
 * `cls`'s tag as it was (3.12 and 3.13 tag `cls` all the same, and their own attribute
 * cache goes stale). Pointers alone are compared: no code of anyone's runs. */
static int
ancestry_tagged(PyTypeObject *cls)
{
    PyObject *mro = cls->tp_mro;
    if (mro == NULL || !PyTuple_CheckExact(mro)) {
        return 0;
    }
    int budget = 4096;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(mro); k++) {
        if (!descends(cls, PyTuple_GET_ITEM(mro, k), &budget)) {
            return 0;
        }
    }
    return 1;
}

/* Remember that the class-level tests of `instance` passed under `tag`, read before them,
 * where its class `cls` still has it (nothing they ran changed the class) and every
 * change to its ancestry renews it (ancestry_tagged). */
static void
vouch(CleanFilter *self, PyObject *instance, PyTypeObject *cls, unsigned int tag)
{
    if (tag == 0 || cls->tp_version_tag != tag || !ancestry_tagged(cls)) {
        return;
    }
    PyObject *seen = PyLong_FromUnsignedLong(tag);
    if (seen == NULL) {
        PyErr_Clear();  /* only the next call's tests are not spared */
        return;
    }
    Py_XSETREF(*(PyObject **)((char *)instance + self->instance.version), seen);
}

/* `obj.<name>` found the generic way (a new reference), as
 * readback.generic_attribute finds it: never through `obj.__dict__`, which would make
 * the dict CPython keeps inline until asked for (and slow every later attribute read and
 * write of the object). NULL where `obj` is no longer such an instance (fastpath._Instance),
 * or with the lookup's error set (an AttributeError: none; the callback clears it). */
static PyObject *
generic_attribute(CleanFilter *self, PyObject *instance, PyObject *obj, PyObject *name)
{
    if (!PyUnicode_CheckExact(name) || !still_instance(self, instance, obj)) {
        return NULL;
    }
    return PyObject_GenericGetAttr(obj, name);
}

/* On 3.13, CPython's own lookup of a method about to be called (LOAD_ATTR's, for C code;
 * exported, PyAPI_FUNC, and declared in its internal headers): it makes the generic
 * read's lookups without making the bound method, which costs ~80 ns a call there.
 * From 3.14 a bound method is made as cheaply as the lookup's own work (measured), and
 * the generic read is kept. */
#define METHOD_LOOKUP (PY_VERSION_HEX >= 0x030D0000 && PY_VERSION_HEX < 0x030E0000)
#if METHOD_LOOKUP
PyAPI_FUNC(int) _PyObject_GetMethod(PyObject *obj, PyObject *name, PyObject **method);
#endif

/* Whether `obj.<name>`, found the generic way, is `function` bound to `obj` (a method
 * of `obj`'s class, as fastpath.Receiver tests it): 1 or 0, with the lookup's error set
 * where it failed. With METHOD_LOOKUP, where `obj`'s class reads attributes the generic
 * way, _PyObject_GetMethod hands back the function itself where the read would bind it,
 * else what the read would return. 0 where `obj` is no longer such an instance
 * (fastpath._Instance). */
static int
binds_method(CleanFilter *self, PyObject *instance, PyObject *obj, PyObject *name,
             PyObject *function)
{
    if (!PyUnicode_CheckExact(name) || !still_instance(self, instance, obj)) {
        return 0;
    }
    PyObject *found = NULL;
    int unbound = 0;
#if METHOD_LOOKUP
    if (Py_TYPE(obj)->tp_getattro == PyObject_GenericGetAttr) {
        unbound = _PyObject_GetMethod(obj, name, &found);
    }
    else
#endif
    {
        found = PyObject_GenericGetAttr(obj, name);
    }
    int binds = unbound ? found == function
                        : found != NULL && Py_IS_TYPE(found, &PyMethod_Type)
                              && PyMethod_GET_FUNCTION(found) == function
                              && PyMethod_GET_SELF(found) == obj;
    Py_XDECREF(found);
    return binds;
}

/* The caller's local `variable`, as f_locals has it, or its plain dict of globals' (never
 * a builtin: fastpath._root), a new reference; NULL where there is none. */
static PyObject *
root_read(PyFrameObject *caller, PyObject *globals, int from_globals, PyObject *variable)
{
    if (from_globals) {
        return PyDict_CheckExact(globals)
                   ? Py_XNewRef(PyDict_GetItemWithError(globals, variable)) : NULL;
    }
    return PyFrame_GetVar(caller, variable);
}

/* `mapping[key]` for an exact str or int `key`, found among the stored keys of its own
 * type as fastpath._dict_item finds it (a new reference), or NULL. Comparing exact strs
 * or ints runs no code, so nothing changes the dict while it is read. */
static PyObject *
dict_item(CleanFilter *self, PyObject *mapping, PyObject *key)
{
    if (!(PyUnicode_CheckExact(key) || PyLong_CheckExact(key))
        || PyDict_GET_SIZE(mapping) > self->dict_scan_limit) {
        return NULL;
    }
    Py_ssize_t pos = 0;
    PyObject *stored, *value;
    while (PyDict_Next(mapping, &pos, &stored, &value)) {
        if (stored == key) {
            return Py_NewRef(value);
        }
        if (Py_TYPE(stored) == Py_TYPE(key)) {
            int equal = PyObject_RichCompareBool(stored, key, Py_EQ);
            if (equal != 0) {
                return equal > 0 ? Py_NewRef(value) : NULL;
            }
        }
    }
    return NULL;
}

/* `obj[key]` of an exact list, tuple or dict as fastpath.Item.read does (a new
 * reference), or NULL where the step no longer holds. */
static PyObject *
item_read(CleanFilter *self, PyObject *step, PyObject *obj, PyFrameObject *caller,
          PyObject *globals)
{
    ItemSlots *it = &self->item;
    PyObject *key = slot(step, it->key), *variable = slot(step, it->variable);
    PyObject *from_globals = slot(step, it->from_globals);
    if (!key || !variable || !from_globals) {
        return NULL;
    }
    if (key == Py_None) {
        if (!PyUnicode_CheckExact(variable)) {
            return NULL;
        }
        key = root_read(caller, globals, from_globals == Py_True, variable);
        if (key == NULL) {
            return NULL;
        }
    }
    else {
        Py_INCREF(key);
    }
    PyObject *item = NULL;
    if (PyDict_CheckExact(obj)) {
        item = dict_item(self, obj, key);
    }
    else if ((PyList_CheckExact(obj) || PyTuple_CheckExact(obj)) && PyLong_CheckExact(key)) {
        Py_ssize_t k = PyLong_AsSsize_t(key);  /* -1 and an error where it is too large */
        Py_ssize_t size = PyList_CheckExact(obj) ? PyList_GET_SIZE(obj) : PyTuple_GET_SIZE(obj);
        if (k >= 0 && k < size) {
            item = Py_NewRef(PyList_CheckExact(obj) ? PyList_GET_ITEM(obj, k)
                                                    : PyTuple_GET_ITEM(obj, k));
        }
    }
    Py_DECREF(key);
    return item;
}

/* The class-level tests of a Step on its class's instance `obj`: its instances'
 * attributes are still found the generic way, behind what its classes held under the
 * step's name when it was learnt; remembered under `tag` where they pass. */
static int
step_class_holds(CleanFilter *self, PyObject *step, PyObject *obj, unsigned int tag)
{
    PyTypeObject *cls = (PyTypeObject *)slot(step, self->instance.cls);
    int holds = generic_lookup(self, step, obj)
                && same_shadow(cls, slot(step, self->step.name), slot(step, self->step.shadow))
                && still_instance(self, step, obj);
    if (holds) {
        vouch(self, step, cls, tag);
    }
    return holds;
}

/* One step of a receiver's path read off `obj` (a new reference), or NULL where it no
 * longer holds: `obj.<name>` found the generic way as fastpath.Step.read finds it, or
 * an item (item_read). */
static PyObject *
step_read(CleanFilter *self, PyObject *step, PyObject *obj, PyFrameObject *caller,
          PyObject *globals)
{
    if (Py_IS_TYPE(step, self->item_type)) {
        return item_read(self, step, obj, caller, globals);
    }
    if (!Py_IS_TYPE(step, self->step_type)) {
        return NULL;
    }
    PyObject *name = slot(step, self->step.name), *shadow = slot(step, self->step.shadow);
    if (!name || !shadow || !PyUnicode_CheckExact(name)) {
        return NULL;
    }
    if (!still_instance(self, step, obj)) {
        return NULL;
    }
    /* The class the step names (`obj`'s, as still_instance found), which the step holds. */
    PyTypeObject *cls = (PyTypeObject *)slot(step, self->instance.cls);
    unsigned int tag = version_tag(cls);
    /* Its tag again: a stored key's __eq__ in those tests may have changed the class (given
     * it a property, which the generic read would run). */
    if ((!vouched(self, step, tag) && !step_class_holds(self, step, obj, tag))
        || cls->tp_version_tag != tag) {
        return NULL;
    }
    PyObject *value = generic_attribute(self, step, obj, name);
    /* A stored key's __eq__ in that lookup may have changed `obj` or its class. */
    if (value != NULL && (!still_instance(self, step, obj) || cls->tp_version_tag != tag)) {
        Py_CLEAR(value);
    }
    return value;
}

/* The object a path reaches (a new reference): the caller's local or global `variable`
 * (in a module's body, `in_body`, only while its locals are its globals), then each
 * step of `path`; NULL where it no longer holds (fastpath._follow). */
static PyObject *
path_read(CleanFilter *self, PyObject *variable, PyObject *from_globals, PyObject *in_body,
          PyObject *path, PyFrameObject *caller, PyObject *globals)
{
    if (!variable || !from_globals || !in_body || !path || !PyUnicode_CheckExact(variable)
        || !PyTuple_CheckExact(path) || (in_body == Py_True && !module_body(caller, globals))) {
        return NULL;
    }
    PyObject *obj = root_read(caller, globals, from_globals == Py_True, variable);
    for (Py_ssize_t k = 0; obj != NULL && k < PyTuple_GET_SIZE(path); k++) {
        PyObject *next = step_read(self, PyTuple_GET_ITEM(path, k), obj, caller, globals);
        Py_SETREF(obj, next);
    }
    return obj;
}

/* The class-level tests of a Receiver `check` on its class's instance `obj`: the class's
 * own namespace still binds the attribute to the watched function, and its instances'
 * attributes are still found the generic way; remembered under `tag` where they pass. */
static int
receiver_class_holds(CleanFilter *self, PyObject *check, PyObject *obj, unsigned int tag)
{
    PyTypeObject *cls = (PyTypeObject *)slot(check, self->instance.cls);
    PyObject *namespace = PyType_GetDict(cls);
    int holds = namespace != NULL
                && PyDict_GetItemWithError(namespace, slot(check, self->receiver.attribute))
                       == slot(check, self->receiver.target)
                && generic_lookup(self, check, obj);
    Py_XDECREF(namespace);
    if (holds) {
        vouch(self, check, cls, tag);
    }
    return holds;
}

/* Whether the receiver the site loads, the caller's local or global, or a path of
 * attributes and items from it, is still an instance of the class that binds the watched method,
 * unshadowed (fastpath.Receiver.__call__, on the same fields). */
static int
receiver_holds(CleanFilter *self, PyObject *check, PyFrameObject *caller, PyObject *globals)
{
    ReceiverSlots *r = &self->receiver;
    PyObject *attribute = slot(check, r->attribute), *target = slot(check, r->target);
    PyObject *cls = slot(check, self->instance.cls);
    if (!attribute || !target || !cls || !PyType_Check(cls)) {
        return FULL;
    }
    PyObject *obj = path_read(self, slot(check, r->variable), slot(check, r->from_globals),
                              slot(check, r->module_body), slot(check, r->path), caller, globals);
    if (obj == NULL) {
        return FULL;
    }
    int result = FULL;
    unsigned int tag = version_tag((PyTypeObject *)cls);
    if (Py_TYPE(obj) != (PyTypeObject *)cls
        || (!vouched(self, check, tag) && !receiver_class_holds(self, check, obj, tag))
        || ((PyTypeObject *)cls)->tp_version_tag != tag) {  /* changed by those tests */
        goto done;
    }
    /* The lookup may run a stored key's __eq__, which may change `obj` or its class. */
    if (binds_method(self, check, obj, attribute, target) && still_instance(self, check, obj)
        && ((PyTypeObject *)cls)->tp_version_tag == tag) {
        result = ANSWERED;
    }
done:
    Py_DECREF(obj);
    return result;
}

/* What a call's `*` or `**` part holds now (a new reference), or NULL (fastpath.Part). */
static PyObject *
part_read(CleanFilter *self, PyObject *part, PyFrameObject *caller, PyObject *globals)
{
    if (!Py_IS_TYPE(part, self->part_type)) {
        return NULL;
    }
    PartSlots *p = &self->part;
    return path_read(self, slot(part, p->variable), slot(part, p->from_globals),
                     slot(part, p->module_body), slot(part, p->steps), caller, globals);
}

/* How many items the `*` parts pass (exact lists and tuples), or -1. */
static Py_ssize_t
items_passed(CleanFilter *self, PyObject *parts, PyFrameObject *caller, PyObject *globals)
{
    Py_ssize_t total = 0;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(parts); k++) {
        PyObject *value = part_read(self, PyTuple_GET_ITEM(parts, k), caller, globals);
        if (value == NULL || !(PyList_CheckExact(value) || PyTuple_CheckExact(value))) {
            Py_XDECREF(value);
            return -1;
        }
        total += PyList_CheckExact(value) ? PyList_GET_SIZE(value) : PyTuple_GET_SIZE(value);
        Py_DECREF(value);
    }
    return total;
}

/* Whether the `**` parts (exact dicts of exact str keys) hold `stream`: 1, 0, or -1
 * where one cannot be read back that way. */
static int
keyword_passed(CleanFilter *self, PyObject *parts, PyObject *stream, PyFrameObject *caller,
               PyObject *globals)
{
    int found = 0;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(parts); k++) {
        PyObject *value = part_read(self, PyTuple_GET_ITEM(parts, k), caller, globals);
        if (value == NULL || !PyDict_CheckExact(value)) {
            Py_XDECREF(value);
            return -1;
        }
        PyObject *key, *item;
        Py_ssize_t at = 0;
        int plain = 1;
        while (plain && PyDict_Next(value, &at, &key, &item)) {  /* no code of the user's */
            plain = PyUnicode_CheckExact(key);
            found = found || (plain && PyUnicode_Compare(key, stream) == 0);
        }
        Py_DECREF(value);
        if (!plain) {
            return -1;
        }
    }
    return found;
}

/* Whether a call with `*` or `**` parts still loads the watched function and passes its
 * stream (fastpath.Spread.__call__, on the same fields). */
static int
spread_holds(CleanFilter *self, PyObject *check, PyFrameObject *caller, PyObject *globals)
{
    SpreadSlots *sp = &self->spread;
    PyObject *loads = slot(check, sp->loads), *stream = slot(check, sp->stream);
    PyObject *position = slot(check, sp->position), *positional = slot(check, sp->positional);
    PyObject *keywords = slot(check, sp->keywords), *sequences = slot(check, sp->sequences);
    PyObject *mappings = slot(check, sp->mappings);
    if (!loads || !stream || !position || !positional || !keywords || !sequences || !mappings
        || !PyUnicode_CheckExact(stream) || !PyLong_CheckExact(position)
        || !PyLong_CheckExact(positional) || !PyFrozenSet_CheckExact(keywords)
        || !PyTuple_CheckExact(sequences) || !PyTuple_CheckExact(mappings)) {
        return FULL;
    }
    int loaded = FULL;
    if (Py_IS_TYPE(loads, self->receiver_type)) {
        loaded = receiver_holds(self, loads, caller, globals);
    }
    else if (PyMethod_Check(loads) && PyMethod_GET_FUNCTION(loads) == self->binding_holds) {
        loaded = binding_holds(self, PyMethod_GET_SELF(loads), caller, globals);
    }
    if (loaded != ANSWERED) {
        return FULL;
    }
    Py_ssize_t items = items_passed(self, sequences, caller, globals);
    if (items < 0) {
        return FULL;
    }
    Py_ssize_t at = PyLong_AsSsize_t(position), before = PyLong_AsSsize_t(positional);
    if ((at == -1 || before == -1) && PyErr_Occurred()) {
        return FULL;
    }
    int passed = before + items > at || PySet_Contains(keywords, stream) == 1;
    int in_dicts = keyword_passed(self, mappings, stream, caller, globals);
    if (in_dicts < 0 || PyErr_Occurred()) {
        return FULL;
    }
    return passed || in_dicts ? ANSWERED : FULL;
}
#endif

/* Whether a remembered site still calls the watched function the way it was learnt: by
 * its `binding` (a Binding, or None) or else its `check` (None, a Receiver, a Spread, or
 * any other check, called), the fields of a fastpath.Clean or fastpath.Repeat. May return
 * FULL with an error set: the check's (see site_loads). */
static int
site_check(CleanFilter *self, PyObject *binding, PyObject *check, PyFrameObject *caller,
           PyObject *globals)
{
    if (binding == NULL || check == NULL) {
        return FULL;
    }
    if (binding != Py_None) {
        return binding_holds(self, binding, caller, globals);
    }
    if (check == Py_None) {
        return ANSWERED;
    }
#if PY_VERSION_HEX >= 0x030C0000
    if (Py_IS_TYPE(check, self->receiver_type)) {
        return receiver_holds(self, check, caller, globals);
    }
    if (Py_IS_TYPE(check, self->spread_type)) {
        return spread_holds(self, check, caller, globals);
    }
#endif
    PyObject *result = PyObject_CallOneArg(check, (PyObject *)caller);
    if (result == NULL) {
        return FULL;
    }
    int loads = PyObject_IsTrue(result);
    Py_DECREF(result);
    return loads > 0 ? ANSWERED : FULL;
}

/* Whether the error set came out of a signal handler of the program's
 * (handlers.raised_by_handler): its own, to pass on. It stays set. */
static int
handler_raised(CleanFilter *self)
{
    PyObject *error = PyErr_GetRaisedException();
    PyObject *answer = PyObject_CallOneArg(self->by_handler, error);
    int raised = answer == Py_True;
    Py_XDECREF(answer);
    PyErr_Clear();  /* the test's own failure: not the handler's then */
    PyErr_SetRaisedException(error);
    return raised;
}

/* site_check, its error handled as the Python callback handles a check's: an Exception
 * means the site does not load the function that way (FULL, the error cleared: the
 * callback tests again), and any other (a KeyboardInterrupt that a signal handler raised
 * in the check, say), or one a signal handler raised, reaches the call (FAILED, the
 * error set). */
static int
site_loads(CleanFilter *self, PyObject *binding, PyObject *check, PyFrameObject *caller,
           PyObject *globals)
{
    int loads = site_check(self, binding, check, caller, globals);
    if (loads != ANSWERED && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_Exception) || handler_raised(self)) {
            return FAILED;
        }
        PyErr_Clear();
    }
    return loads == ANSWERED ? ANSWERED : FULL;
}

/* Whether `globals` holds the very object `name` under "__name__" (None: no such key), as
 * a site remembered it; 0 with the lookup's error set where it raised (a str subclass
 * key's __eq__). */
static int
named(CleanFilter *self, PyObject *globals, PyObject *name)
{
    PyObject *found = PyDict_GetItemWithError(globals, self->s_name);
    if (found == NULL && PyErr_Occurred()) {
        return 0;
    }
    return (found == NULL ? Py_None : found) == name;
}

/* The last clean site found in a filter's table (fastpath.table) by the caller's code
 * and offset and the callee's code: a hot loop asks for the same one at every call, and
 * finding it again here spares the offset's int, the table's lookup and its compare.
 * Its pointers are borrowed from the table, which holds `clean` (and `clean` its codes):
 * the table is watched, and the memo is forgotten before any change to it is made. */
static struct {
    PyObject *table, *caller, *callee, *clean;
    int lasti;
} memo;
static int table_watcher = -1;  /* none yet */

static int
table_changed(PyDict_WatchEvent event, PyObject *dict, PyObject *key, PyObject *value)
{
    if (dict == memo.table) {
        memo.table = NULL;
    }
    return 0;
}

/* Watch `table` for the memo's sake: 1, or 0 where CPython has no watcher left to
 * give (the table is then looked up at every call), or -1 with an error set. */
static int
watch(PyObject *table)
{
    if (table_watcher < 0) {
        table_watcher = PyDict_AddWatcher(table_changed);
        if (table_watcher < 0) {
            PyErr_Clear();
            return 0;
        }
    }
    return PyDict_Watch(table_watcher, table) < 0 ? -1 : 1;
}

/* The remembered clean site in the table at `key` for `caller_code` (borrowed), or NULL
 * (with the lookup's error set where it failed); `direct` tells whether the table holds
 * it itself (not among the sites of several callers sharing the offset). */
static PyObject *
table_site(CleanFilter *self, PyObject *key, PyCodeObject *caller_code, int *direct)
{
    PyObject *clean = PyDict_GetItemWithError(self->table, key);
    *direct = clean != NULL && !Py_IS_TYPE(clean, self->several_type);
    if (clean == NULL || *direct) {
        return clean;
    }
    PyObject *others = slot(clean, self->several_others);
    key = PyLong_FromVoidPtr(caller_code);  /* id() of the caller's code */
    clean = NULL;
    if (key != NULL && others != NULL && PyDict_CheckExact(others)) {
        clean = PyDict_GetItemWithError(others, key);
    }
    Py_XDECREF(key);
    return clean;
}

/* The remembered clean site `caller` is executing for `code`, or NULL (a new reference). */
static PyObject *
clean_site(CleanFilter *self, PyObject *code, PyFrameObject *caller, PyObject *globals)
{
    int lasti = PyFrame_GetLasti(caller), direct = 0;
    PyCodeObject *caller_code = PyFrame_GetCode(caller);
    PyObject *clean = NULL;
    if (memo.table != NULL && memo.table == self->table && memo.lasti == lasti
        && memo.caller == (PyObject *)caller_code && memo.callee == code) {
        clean = memo.clean;
    }
    else {
        PyObject *key = PyLong_FromLong(lasti);
        clean = key == NULL ? NULL : table_site(self, key, caller_code, &direct);
        Py_XDECREF(key);
        if (clean == NULL || !Py_IS_TYPE(clean, self->clean_type)
            || slot(clean, self->clean.caller) != (PyObject *)caller_code
            || slot(clean, self->clean.callee) != code) {
            clean = NULL;
        }
        else if (direct && self->watched) {
            memo.table = self->table;
            memo.caller = (PyObject *)caller_code;
            memo.callee = code;
            memo.clean = clean;
            memo.lasti = lasti;
        }
    }
    Py_DECREF(caller_code);
    if (clean == NULL) {
        return NULL;
    }
    /* Held from here: the lookup below may run a str subclass key's __eq__, which may
     * empty the table. */
    Py_INCREF(clean);
    if (!named(self, globals, slot(clean, self->clean.name))) {
        Py_DECREF(clean);
        return NULL;
    }
    return clean;
}

/* fastpath.quiet's answer for `tracers` in this thread (a new reference), read from
 * fastpath.last where it is the last one, as the Python callback does. */
static PyObject *
quiet_answer(CleanFilter *self, PyObject *tracers)
{
    unsigned long me = PyThread_get_thread_ident();
    PyObject *now = slot(self->last, self->last_now);
    if (now != NULL && Py_IS_TYPE(now, self->quiet_type)
        && slot(now, self->q.tracers) == tracers) {
        PyObject *thread = slot(now, self->q.thread);
        if (thread != NULL && PyLong_CheckExact(thread)) {
            unsigned long theirs = PyLong_AsUnsignedLong(thread);
            if (theirs == me && !PyErr_Occurred()) {
                return Py_NewRef(now);
            }
            PyErr_Clear();
        }
    }
    PyObject *thread = PyLong_FromUnsignedLong(me);
    if (thread == NULL) {
        return NULL;
    }
    now = PyObject_CallFunctionObjArgs(self->quiet, tracers, thread, NULL);
    Py_DECREF(thread);
    if (now != NULL && !Py_IS_TYPE(now, self->quiet_type)) {
        Py_CLEAR(now);
    }
    return now;
}

/* The tracers that count the calls at `clean` under `now` (a new reference to a tuple),
 * or NULL where the calls take the full path. */
static PyObject *
watching(CleanFilter *self, PyObject *now, PyObject *clean)
{
    PyObject *mine = slot(now, self->q.mine);
    PyObject *counted = slot(clean, self->clean.counted);
    if (mine == NULL || counted == NULL || !PyDict_CheckExact(mine)) {
        return NULL;
    }
    PyObject *answer = PyDict_GetItemWithError(mine, counted);
    if (answer != NULL && answer != Py_None) {
        Py_INCREF(answer);
    }
    else if (!PyErr_Occurred()) {  /* not asked yet, or the full path: as the callback */
        answer = PyObject_CallFunctionObjArgs(self->counting, now, counted, NULL);
    }
    else {
        return NULL;
    }
    if (answer != NULL && !PyTuple_CheckExact(answer)) {
        Py_CLEAR(answer);
    }
    return answer;
}

/* Where `tracer.clean_calls` is its own slot, found the generic way (the slot of a
 * class whose own namespace holds its member descriptor, no __getattribute__ or
 * __setattr__ of its own): the slot, else NULL. The class seen first is remembered. */
static PyObject **
counter_slot(CleanFilter *self, PyObject *tracer)
{
    PyTypeObject *type = Py_TYPE(tracer);
    if (type->tp_getattro != PyObject_GenericGetAttr
        || type->tp_setattro != PyObject_GenericSetAttr) {
        return NULL;
    }
    if (self->counter_type != NULL && type != self->counter_type) {
        return NULL;
    }
    unsigned int tag = version_tag(type);
    if (self->counter_type != NULL && tag != 0 && tag == self->counter_version) {
        /* Unchanged since its descriptor was found there (see version_tag). */
        return (PyObject **)((char *)tracer + self->counter_offset);
    }
    PyObject *space = PyType_GetDict(type);
    PyObject *descr = space == NULL ? NULL : PyDict_GetItemWithError(space, self->s_clean_calls);
    int mine;
    if (self->counter_type != NULL) {
        mine = descr != NULL && descr == self->counter_descr;
    }
    else {  /* the first class seen: its own object slot's descriptor */
        mine = descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type)
               && ((PyMemberDescrObject *)descr)->d_member->type == Py_T_OBJECT_EX
               && ((PyMemberDescrObject *)descr)->d_common.d_type == type;
        if (mine) {
            self->counter_type = (PyTypeObject *)Py_NewRef(type);
            self->counter_descr = Py_NewRef(descr);
            self->counter_offset = ((PyMemberDescrObject *)descr)->d_member->offset;
        }
    }
    Py_XDECREF(space);
    if (!mine) {
        PyErr_Clear();  /* a lookup of ours that failed: the generic way tells */
        return NULL;
    }
    self->counter_version = type->tp_version_tag == tag && ancestry_tagged(type) ? tag : 0;
    return (PyObject **)((char *)tracer + self->counter_offset);
}

/* `calls + 1` (a new reference): an exact int's without the number protocol's dispatch
 * (no code of anyone's runs for one), anything else's through it. */
static PyObject *
plus_one(CleanFilter *self, PyObject *calls)
{
    if (PyLong_CheckExact(calls)) {
        int overflow;
        long n = PyLong_AsLongAndOverflow(calls, &overflow);
        if (overflow == 0 && n != -1 && n < LONG_MAX) {
            return PyLong_FromLong(n + 1);
        }
    }
    return PyNumber_InPlaceAdd(calls, self->one);
}

/* Count the call for each of `tracers`: `tracer.clean_calls += 1`, as the Python
 * callback does (an error there is the tracer's, raised as it would be there); in the
 * tracer's own slot where it has one (counter_slot), which is what the attribute's
 * descriptor would read and write. */
static int
count(CleanFilter *self, PyObject *tracers)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tracers); i++) {
        PyObject *tracer = PyTuple_GET_ITEM(tracers, i);
        PyObject **counter = counter_slot(self, tracer);
        if (counter != NULL && *counter != NULL) {
            PyObject *more = plus_one(self, *counter);
            if (more == NULL) {
                return FAILED;
            }
            Py_SETREF(*counter, more);
            continue;
        }
        PyObject *calls = PyObject_GetAttr(tracer, self->s_clean_calls);
        if (calls == NULL) {
            return FAILED;
        }
        PyObject *more = plus_one(self, calls);
        Py_DECREF(calls);
        if (more == NULL) {
            return FAILED;
        }
        int stored = PyObject_SetAttr(tracer, self->s_clean_calls, more);
        Py_DECREF(more);
        if (stored < 0) {
            return FAILED;
        }
    }
    return ANSWERED;
}

/* The remembered repeat site `caller` is executing for `code` under the very globals and
 * module name it was judged with (fastpath.answer_repeat's lookups), or NULL (a new
 * reference). */
static PyObject *
repeat_site(CleanFilter *self, PyObject *code, PyFrameObject *caller, PyObject *globals)
{
    PyCodeObject *caller_code = PyFrame_GetCode(caller);
    PyObject *key = PyLong_FromVoidPtr(caller_code);  /* id() of the caller's code */
    PyObject *sites = key == NULL ? NULL : PyDict_GetItemWithError(self->repeats, key);
    Py_XDECREF(key);
    PyObject *known = NULL;
    if (sites != NULL && PyDict_CheckExact(sites)) {
        key = PyLong_FromLong(PyFrame_GetLasti(caller));
        known = key == NULL ? NULL : PyDict_GetItemWithError(sites, key);
        Py_XDECREF(key);
    }
    int found = known != NULL && Py_IS_TYPE(known, self->repeat_type)
                && slot(known, self->repeat.caller) == (PyObject *)caller_code
                && slot(known, self->repeat.callee) == code
                && slot(known, self->repeat.globals) == globals;
    Py_DECREF(caller_code);
    if (!found) {
        return NULL;
    }
    /* Held from here: the lookup below may run a str subclass key's __eq__. */
    Py_INCREF(known);
    if (!named(self, globals, slot(known, self->repeat.name))) {
        Py_DECREF(known);
        return NULL;
    }
    return known;
}

/* A repeat of a judged call at a remembered site, answered by the tracer that remembered
 * it, as fastpath.answer_repeat answers it: where that tracer is the only one of this
 * thread watching the call and the site still loads the watched function, its answer is
 * called. ANSWERED where it took the call; FULL where the Python callback decides (it
 * refused, or a RecursionError: the callback asks again and judges in full, as
 * answer_repeat does); FAILED: an error to raise into the call (the answer's, or one the
 * Python callback would not catch either). */
static int
answer_repeat(CleanFilter *self, PyObject *code, PyObject *tracers, PyFrameObject *caller,
              PyObject *globals)
{
    PyObject *known = repeat_site(self, code, caller, globals);
    if (known == NULL) {
        return FULL;
    }
    int result = FULL;
    PyObject *now = quiet_answer(self, tracers);
    PyObject *alone = now == NULL ? NULL : slot(now, self->q.alone);
    PyObject *op = slot(known, self->repeat.op), *tracer = slot(known, self->repeat.tracer);
    if (alone == NULL || op == NULL || tracer == NULL || !PyDict_CheckExact(alone)
        || !PyUnicode_CheckExact(op) || PyDict_GetItemWithError(alone, op) != tracer) {
        goto done;
    }
    PyObject *binding = slot(known, self->repeat.binding), *check = slot(known, self->repeat.check);
    PyObject *answer = slot(known, self->repeat.answer);
    int loads = answer == NULL ? FULL : site_loads(self, binding, check, caller, globals);
    if (loads != ANSWERED) {
        result = loads;
        goto done;
    }
    PyObject *answered = PyObject_CallNoArgs(answer);  /* `known`, held, holds it */
    if (answered == NULL) {
        result = FAILED;
        if (PyErr_ExceptionMatches(PyExc_RecursionError) && !handler_raised(self)) {
            PyErr_Clear();
            result = FULL;
        }
    }
    else {
        result = answered == Py_False ? FULL : ANSWERED;
        Py_DECREF(answered);
    }
done:
    Py_XDECREF(now);
    Py_DECREF(known);
    return result;
}

/* ANSWERED: a clean call, counted; FULL: for the Python callback (no error set);
 * FAILED: an error to raise into the call, as the Python callback would. */
static int
answer(CleanFilter *self, PyObject *code, PyObject *tracers)
{
    /* The watched function's caller, as sys._getframe(2) in the callback. */
    PyFrameObject *caller = caller_frame(code);
    if (caller == NULL) {
        PyErr_Clear();  /* a frame object it could not make: the callback tries again */
        return FULL;
    }
    int result = FULL;
    PyObject *now = NULL, *counting = NULL, *clean = NULL;
    PyObject *globals = PyFrame_GetGlobals(caller);
    if (globals == NULL || !PyDict_Check(globals)) {
        goto done;
    }
    clean = clean_site(self, code, caller, globals);
    if (clean == NULL) {
        if (!PyErr_Occurred() && PyDict_GET_SIZE(self->repeats) > 0) {
            result = answer_repeat(self, code, tracers, caller, globals);
        }
        goto done;
    }
    PyObject *binding = slot(clean, self->clean.binding), *check = slot(clean, self->clean.check);
    int loads = site_loads(self, binding, check, caller, globals);
    if (loads != ANSWERED) {
        result = loads;
        goto done;
    }
    now = quiet_answer(self, tracers);
    counting = now == NULL ? NULL : watching(self, now, clean);
    if (counting != NULL) {
        result = count(self, counting);
    }
done:
    if (result == FULL && PyErr_Occurred()) {
        /* Raised by code the callback runs outside any `try` as well (fastpath.quiet or
         * counting, a str subclass key's __eq__ in a lookup, a signal handler in any of
         * them): it reaches the call, as from there; calling the callback would lose it. */
        result = FAILED;
    }
    Py_XDECREF(counting);
    Py_XDECREF(now);
    Py_XDECREF(clean);
    Py_XDECREF(globals);
    Py_DECREF(caller);
    return result;
}

/* How many filter calls this thread is inside: Python code it runs (fastpath's helpers,
 * and whatever a signal handler or finaliser does there) has no callback frame of its
 * own below it to tell, so `running()` tells instead. */
static _Thread_local int running;

static PyObject *
filter_call(CleanFilter *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (self->on_start == NULL) {  /* cleared (garbage being collected): nothing to do */
        Py_RETURN_NONE;
    }
    if (PyVectorcall_NARGS(nargsf) == 2 && kwnames == NULL) {
        PyObject *tracers = NULL;
        if (PyContextVar_Get(self->active, NULL, &tracers) < 0) {
            PyErr_Clear();
        }
        int result = FULL;
        if (tracers != NULL && PyTuple_CheckExact(tracers)) {
            result = PyTuple_GET_SIZE(tracers) == 0 ? ANSWERED : answer(self, args[0], tracers);
        }
        Py_XDECREF(tracers);
        if (result == ANSWERED) {
            Py_RETURN_NONE;
        }
        if (result == FAILED) {
            return NULL;
        }
    }
    return PyObject_Vectorcall(self->on_start, args, nargsf, kwnames);
}


static PyObject *
filter_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    running++;
    PyObject *result = filter_call((CleanFilter *)callable, args, nargsf, kwnames);
    running--;
    return result;
}

static PyObject *
fastclean_running(PyObject *module, PyObject *unused)
{
    return PyBool_FromLong(running > 0);
}

static PyMethodDef fastclean_methods[] = {
    {"running", fastclean_running, METH_NOARGS,
     PyDoc_STR("running(): whether this thread is inside a CleanFilter's call.")},
    {NULL, NULL, 0, NULL},
};

static int
filter_traverse(CleanFilter *self, visitproc visit, void *arg)
{
    Py_VISIT(self->on_start);
    Py_VISIT(self->active);
    Py_VISIT(self->table);
    Py_VISIT(self->repeats);
    Py_VISIT(self->last);
    Py_VISIT(self->quiet);
    Py_VISIT(self->counting);
    Py_VISIT(self->by_handler);
    Py_VISIT(self->clean_type);
    Py_VISIT(self->several_type);
    Py_VISIT(self->binding_type);
    Py_VISIT(self->receiver_type);
    Py_VISIT(self->step_type);
    Py_VISIT(self->item_type);
    Py_VISIT(self->part_type);
    Py_VISIT(self->spread_type);
    Py_VISIT(self->binding_holds);
    Py_VISIT(self->quiet_type);
    Py_VISIT(self->repeat_type);
    Py_VISIT(self->counter_type);
    Py_VISIT(self->counter_descr);
    return 0;
}

static int
filter_clear(CleanFilter *self)
{
    Py_CLEAR(self->on_start);
    Py_CLEAR(self->active);
    Py_CLEAR(self->table);
    Py_CLEAR(self->repeats);
    Py_CLEAR(self->last);
    Py_CLEAR(self->quiet);
    Py_CLEAR(self->counting);
    Py_CLEAR(self->by_handler);
    Py_CLEAR(self->clean_type);
    Py_CLEAR(self->several_type);
    Py_CLEAR(self->binding_type);
    Py_CLEAR(self->receiver_type);
    Py_CLEAR(self->step_type);
    Py_CLEAR(self->item_type);
    Py_CLEAR(self->part_type);
    Py_CLEAR(self->spread_type);
    Py_CLEAR(self->binding_holds);
    Py_CLEAR(self->quiet_type);
    Py_CLEAR(self->repeat_type);
    Py_CLEAR(self->counter_type);
    Py_CLEAR(self->counter_descr);
    Py_CLEAR(self->s_name);
    Py_CLEAR(self->s_clean_calls);
    Py_CLEAR(self->s_getattribute);
    Py_CLEAR(self->one);
    return 0;
}

static void
filter_dealloc(CleanFilter *self)
{
    PyObject_GC_UnTrack(self);
    filter_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
take(PyObject *module, const char *name, PyObject **out)
{
    *out = PyObject_GetAttrString(module, name);
    return *out == NULL ? -1 : 0;
}

/* Step and Receiver share fastpath._Instance's slots: one set of offsets reads both. */
static int
same_offsets(PyTypeObject *step, PyTypeObject *receiver, InstanceSlots *i)
{
    InstanceSlots other;
    if (slot_offset(step, "cls", &other.cls) < 0
        || slot_offset(step, "mro", &other.mro) < 0
        || slot_offset(step, "changeable", &other.changeable) < 0
        || slot_offset(step, "version", &other.version) < 0) {
        return 0;
    }
    if (other.cls != i->cls || other.mro != i->mro || other.changeable != i->changeable
        || other.version != i->version) {
        PyErr_Format(PyExc_TypeError, "%s and %s do not share their instances' slots",
                     step->tp_name, receiver->tp_name);
        return 0;
    }
    return 1;
}

static int
read_repeat_slots(CleanFilter *self)
{
    PyTypeObject *repeat = self->repeat_type;
    RepeatSlots *r = &self->repeat;
    return (slot_offset(repeat, "caller", &r->caller) < 0
            || slot_offset(repeat, "callee", &r->callee) < 0
            || slot_offset(repeat, "globals", &r->globals) < 0
            || slot_offset(repeat, "name", &r->name) < 0
            || slot_offset(repeat, "op", &r->op) < 0
            || slot_offset(repeat, "tracer", &r->tracer) < 0
            || slot_offset(repeat, "binding", &r->binding) < 0
            || slot_offset(repeat, "check", &r->check) < 0
            || slot_offset(repeat, "answer", &r->answer) < 0)
               ? -1
               : 0;
}

static int
read_fastpath(CleanFilter *self, PyObject *fastpath)
{
    if (take(fastpath, "table", &self->table) < 0 || take(fastpath, "last", &self->last) < 0
        || take(fastpath, "repeats", &self->repeats) < 0
        || take(fastpath, "quiet", &self->quiet) < 0
        || take(fastpath, "counting", &self->counting) < 0
        || take(fastpath, "raised_by_handler", &self->by_handler) < 0
        || get_type(fastpath, "Clean", &self->clean_type) < 0
        || get_type(fastpath, "_Several", &self->several_type) < 0
        || get_type(fastpath, "Binding", &self->binding_type) < 0
        || get_type(fastpath, "Receiver", &self->receiver_type) < 0
        || get_type(fastpath, "Step", &self->step_type) < 0
        || get_type(fastpath, "Item", &self->item_type) < 0
        || get_type(fastpath, "Part", &self->part_type) < 0
        || get_type(fastpath, "Spread", &self->spread_type) < 0
        || get_type(fastpath, "Quiet", &self->quiet_type) < 0
        || get_type(fastpath, "Repeat", &self->repeat_type) < 0) {
        return -1;
    }
    self->binding_holds = PyObject_GetAttrString((PyObject *)self->binding_type, "holds");
    if (self->binding_holds == NULL) {
        return -1;
    }
    PyObject *limit = PyObject_GetAttrString(fastpath, "DICT_SCAN_LIMIT");
    self->dict_scan_limit = limit == NULL ? -1 : PyLong_AsSsize_t(limit);
    Py_XDECREF(limit);
    if (self->dict_scan_limit < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "fastpath.DICT_SCAN_LIMIT is negative");
        }
        return -1;
    }
    if (!PyDict_CheckExact(self->table) || !PyDict_CheckExact(self->repeats)) {
        PyErr_SetString(PyExc_TypeError, "fastpath.table or fastpath.repeats is not a dict");
        return -1;
    }
    self->watched = watch(self->table);
    if (self->watched < 0) {
        return -1;
    }
    CleanSlots *c = &self->clean;
    BindingSlots *b = &self->binding;
    ReceiverSlots *r = &self->receiver;
    PyTypeObject *clean = self->clean_type, *binding = self->binding_type;
    InstanceSlots *i = &self->instance;
    StepSlots *st = &self->step;
    PyTypeObject *receiver = self->receiver_type, *step = self->step_type;
    return (slot_offset(clean, "caller", &c->caller) < 0
            || slot_offset(clean, "callee", &c->callee) < 0
            || slot_offset(clean, "name", &c->name) < 0
            || slot_offset(clean, "binding", &c->binding) < 0
            || slot_offset(clean, "check", &c->check) < 0
            || slot_offset(clean, "counted", &c->counted) < 0
            || slot_offset(binding, "variable", &b->variable) < 0
            || slot_offset(binding, "bound", &b->bound) < 0
            || slot_offset(binding, "namespace", &b->namespace) < 0
            || slot_offset(binding, "attribute", &b->attribute) < 0
            || slot_offset(binding, "target", &b->target) < 0
            || slot_offset(binding, "module_body", &b->module_body) < 0
            || slot_offset(receiver, "variable", &r->variable) < 0
            || slot_offset(receiver, "from_globals", &r->from_globals) < 0
            || slot_offset(receiver, "module_body", &r->module_body) < 0
            || slot_offset(receiver, "path", &r->path) < 0
            || slot_offset(receiver, "attribute", &r->attribute) < 0
            || slot_offset(receiver, "target", &r->target) < 0
            || slot_offset(receiver, "cls", &i->cls) < 0
            || slot_offset(receiver, "mro", &i->mro) < 0
            || slot_offset(receiver, "changeable", &i->changeable) < 0
            || slot_offset(receiver, "version", &i->version) < 0
            || slot_offset(step, "name", &st->name) < 0
            || slot_offset(step, "shadow", &st->shadow) < 0
            || slot_offset(self->item_type, "key", &self->item.key) < 0
            || slot_offset(self->item_type, "variable", &self->item.variable) < 0
            || slot_offset(self->item_type, "from_globals", &self->item.from_globals) < 0
            || slot_offset(self->part_type, "variable", &self->part.variable) < 0
            || slot_offset(self->part_type, "from_globals", &self->part.from_globals) < 0
            || slot_offset(self->part_type, "module_body", &self->part.module_body) < 0
            || slot_offset(self->part_type, "steps", &self->part.steps) < 0
            || slot_offset(self->spread_type, "loads", &self->spread.loads) < 0
            || slot_offset(self->spread_type, "stream", &self->spread.stream) < 0
            || slot_offset(self->spread_type, "position", &self->spread.position) < 0
            || slot_offset(self->spread_type, "positional", &self->spread.positional) < 0
            || slot_offset(self->spread_type, "keywords", &self->spread.keywords) < 0
            || slot_offset(self->spread_type, "sequences", &self->spread.sequences) < 0
            || slot_offset(self->spread_type, "mappings", &self->spread.mappings) < 0
            || !same_offsets(step, receiver, i)
            || slot_offset(self->quiet_type, "tracers", &self->q.tracers) < 0
            || slot_offset(self->quiet_type, "thread", &self->q.thread) < 0
            || slot_offset(self->quiet_type, "mine", &self->q.mine) < 0
            || slot_offset(self->quiet_type, "alone", &self->q.alone) < 0
            || read_repeat_slots(self) < 0
            || slot_offset(self->several_type, "others", &self->several_others) < 0
            || slot_offset(Py_TYPE(self->last), "now", &self->last_now) < 0)
               ? -1
               : 0;
}

static PyObject *
filter_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *on_start, *active, *fastpath;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "CleanFilter() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "CleanFilter", 3, 3, &on_start, &active, &fastpath)) {
        return NULL;
    }
    if (!PyCallable_Check(on_start) || !PyContextVar_CheckExact(active)) {
        PyErr_SetString(PyExc_TypeError,
                        "CleanFilter(on_start, active, fastpath): a callable, a ContextVar "
                        "and the fastpath module");
        return NULL;
    }
    CleanFilter *self = PyObject_GC_New(CleanFilter, type);
    if (self == NULL) {
        return NULL;
    }
    memset((char *)self + offsetof(CleanFilter, on_start), 0,
           sizeof(CleanFilter) - offsetof(CleanFilter, on_start));
    self->vectorcall = filter_vectorcall;
    self->on_start = Py_NewRef(on_start);
    self->active = Py_NewRef(active);
    self->s_name = PyUnicode_InternFromString("__name__");
    self->s_clean_calls = PyUnicode_InternFromString("clean_calls");
    self->s_getattribute = PyUnicode_InternFromString("__getattribute__");
    self->one = PyLong_FromLong(1);
    PyObject_GC_Track(self);
    if (self->s_name == NULL || self->s_clean_calls == NULL || self->s_getattribute == NULL
        || self->one == NULL
        || read_fastpath(self, fastpath) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static PyTypeObject CleanFilterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "trackgen_contract.tracer._fastclean.CleanFilter",
    .tp_doc = PyDoc_STR("CleanFilter(on_start, active, fastpath): a PY_START callback that "
                        "counts a call at a remembered clean site and hands any other call "
                        "to on_start."),
    .tp_basicsize = sizeof(CleanFilter),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = filter_new,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(CleanFilter, vectorcall),
    .tp_traverse = (traverseproc)filter_traverse,
    .tp_clear = (inquiry)filter_clear,
    .tp_dealloc = (destructor)filter_dealloc,
};

static struct PyModuleDef fastclean_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "trackgen_contract.tracer._fastclean",
    .m_doc = PyDoc_STR("The sys.monitoring callback's clean-site test, compiled."),
    .m_size = -1,
    .m_methods = fastclean_methods,
};

PyMODINIT_FUNC
PyInit__fastclean(void)
{
    if (PyType_Ready(&CleanFilterType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&fastclean_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "CleanFilter", (PyObject *)&CleanFilterType) < 0
        || PyModule_AddIntConstant(module, "READS_FRAME_CHAIN", reads_frame_chain) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
