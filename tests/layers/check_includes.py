#!/usr/bin/env python3
"""Holds the code's #includes and MPI calls against the layers the build declares.

The build writes its layers to BUILD/layers.json (cmake/h3d_module.cmake):
each layer's folder, the layers its headers use (depends) and those only
its .cpp files use (private_depends). A file may include:

  - its own layer's headers;
  - a .cpp file: the headers of the layers it names (either kind), and
    what those pass on (their depends, transitively: what CMake's PUBLIC
    links would hand it);
  - a header: the same, through its layer's depends only (a header
    travels to whoever includes it, so what it includes must too).

Besides that:
  - the arrows have no cycle;
  - every source under src/hybrid3d/ and apps/ belongs to a declared layer;
  - MPI is called only in parallel/comm.cpp ("every MPI call goes through
    Comm") and <mpi.h> is included only by parallel/comm.hpp;
  - a *_options.hpp header (an option struct the command line fills) is
    light: what it includes, followed all the way down, is the standard
    library and project headers alone (no MPI, HDF5, oneDNN, JSON), so
    that parsing flags needs neither MPI nor the classes that run them;
  - the command-line parser (apps/hybrid3d but main.cpp) reaches no <mpi.h>.

Usage: check_includes.py --root SOURCE_DIR --layers BUILD/layers.json
       [--self-test] [--graph]
--self-test also plants one violation of each rule into a copy of the tree
(in memory) and fails unless each one is reported: the check can fail.
"""
import argparse
import json
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
MPI_CALL = re.compile(r'\bP?MPI_[A-Z][a-z0-9_]*\s*\(')
COMMENT = re.compile(r'//[^\n]*|/\*.*?\*/', re.S)
SOURCE_DIRS = ('src/hybrid3d', 'apps')
MPI_FILE = 'src/hybrid3d/parallel/comm.cpp'
MPI_HEADER = 'src/hybrid3d/parallel/comm.hpp'
PARSER_FOLDER = 'apps/hybrid3d/'
PROGRAM = 'apps/hybrid3d/main.cpp'


def read_tree(root):
    files = {}
    for top in SOURCE_DIRS:
        for d, _, names in os.walk(os.path.join(root, top)):
            for n in names:
                if n.endswith(('.cpp', '.hpp', '.h')):
                    p = os.path.join(d, n)
                    with open(p, encoding='utf-8') as f:
                        files[os.path.relpath(p, root)] = f.read()
    return files


def layer_of(path, layers):
    best = None
    for name, info in layers.items():
        folder = info['folder'].rstrip('/') + '/'
        if path.startswith(folder) and (best is None or len(folder) > len(layers[best]['folder']) + 1):
            best = name
    return best


def passed_on(layer, layers, seen=None):
    """The layers whose headers reach a user of `layer` (its depends, transitively)."""
    seen = set() if seen is None else seen
    for d in layers[layer]['depends']:
        if d not in seen:
            seen.add(d)
            passed_on(d, layers, seen)
    return seen


def visible(layer, layers, header):
    named = list(layers[layer]['depends']) + ([] if header else list(layers[layer]['private_depends']))
    out = {layer}
    for d in named:
        out.add(d)
        out |= passed_on(d, layers)
    return out


def cycles(layers):
    found, state = [], {}

    def walk(n, stack):
        state[n] = 1
        for d in layers[n]['depends'] + layers[n]['private_depends']:
            if d not in layers:
                found.append(f'layer {n} names {d}, which the build does not declare')
            elif state.get(d) == 1:
                found.append('cycle: ' + ' -> '.join(stack[stack.index(d):] + [n, d]))
            elif d not in state:
                walk(d, stack + [n])
        state[n] = 2

    for n in layers:
        if n not in state:
            walk(n, [])
    return found


def target_layer(path, target, files, layers):
    """The layer of the project file `target` names, or None for an outside header."""
    candidates = [os.path.normpath(os.path.join(os.path.dirname(path), target)),
                  os.path.normpath(os.path.join('src', target))]
    for info in layers.values():  # a layer's own include folder (apps/hybrid3d)
        candidates.append(os.path.normpath(os.path.join(info['folder'], target)))
    for c in candidates:
        if c in files:
            return c, layer_of(c, layers)
    return None, None


def outside_headers(path, files, layers, memo=None):
    """The non-standard <...> headers `path` reaches through its includes."""
    memo = {} if memo is None else memo
    if path in memo:
        return memo[path]
    memo[path] = set()  # include guards: a cycle adds nothing
    out = set()
    for kind, target in INCLUDE.findall(files[path]):
        if kind == '<':
            if '.' in target or '/' in target:  # the standard library's names have neither
                out.add(target)
        else:
            tpath, _ = target_layer(path, target, files, layers)
            if tpath is not None:
                out |= outside_headers(tpath, files, layers, memo)
    memo[path] = out
    return out


def check(files, layers):
    problems = cycles(layers)
    for path, text in sorted(files.items()):
        layer = layer_of(path, layers)
        if layer is None:
            problems.append(f'{path}: in no layer the build declares (cmake/h3d_module.cmake)')
            continue
        header = not path.endswith('.cpp')
        allowed = visible(layer, layers, header)
        for kind, target in INCLUDE.findall(text):
            if kind == '<':
                if target == 'mpi.h' and path != MPI_HEADER:
                    problems.append(f'{path}: includes <mpi.h>; only {MPI_HEADER} may (use Comm)')
                continue
            tpath, tlayer = target_layer(path, target, files, layers)
            if tpath is None:
                if target.startswith('hybrid3d/'):
                    problems.append(f'{path}: includes "{target}", which does not exist')
                continue
            if tlayer not in allowed:
                kind_word = 'header' if header else 'file'
                problems.append(f'{path}: includes {tpath} ({tlayer}), but the {kind_word} of layer {layer} '
                                f'may include only {sorted(allowed)}: declare the arrow in '
                                f'{layers[layer]["folder"]}/CMakeLists.txt or move the code')
        if path.endswith('_options.hpp'):
            outside = outside_headers(path, files, layers)
            if outside:
                problems.append(f'{path}: an options header must stay light, but reaches '
                                f'{", ".join(sorted(outside))}')
        if path.startswith(PARSER_FOLDER) and path != PROGRAM and 'mpi.h' in outside_headers(path, files, layers):
            problems.append(f'{path}: the command-line parser reaches <mpi.h>; include *_options.hpp headers')
        if path not in (MPI_FILE, MPI_HEADER):
            for m in MPI_CALL.finditer(COMMENT.sub('', text)):
                problems.append(f'{path}: calls {m.group(0).rstrip("( ")}; every MPI call goes through Comm '
                                f'({MPI_HEADER})')
    return problems


def self_test(files, layers):
    """Plants one violation per rule; each must be reported."""
    def first(pattern):
        return next(p for p in sorted(files) if re.fullmatch(pattern, p))
    plants = [
        (first(r'src/hybrid3d/core/tensor\.hpp'), '#include "hybrid3d/train/trainer.hpp"\n', 'core/tensor.hpp'),
        (first(r'src/hybrid3d/backend/backend\.hpp'), '#include "hybrid3d/parallel/comm.hpp"\n', 'backend/backend.hpp'),
        (first(r'src/hybrid3d/data/sampler\.cpp'), '#include "hybrid3d/layers/layer.hpp"\n', 'data/sampler.cpp'),
        (first(r'src/hybrid3d/data/stage\.cpp'), 'void f() { MPI_Barrier(MPI_COMM_WORLD); }\n', 'MPI_Barrier'),
        (first(r'src/hybrid3d/models/network\.hpp'), '#include <mpi.h>\n', 'models/network.hpp: includes <mpi.h>'),
    ]
    # A header may not pass on a private arrow: declare models' arrow to
    # layers private, and network.hpp (which includes layers/) must be reported.
    private = json.loads(json.dumps(layers))
    private['models']['private_depends'] = private['models']['depends']
    private['models']['depends'] = []
    found = [p for p in check(files, private) if p.startswith('src/hybrid3d/models/network.hpp')]
    print(f'self-test: models/network.hpp through a private arrow: {"reported" if found else "NOT REPORTED"}')
    failed = [] if found else ['private arrow']
    options = sorted(p for p in files if p.endswith('_options.hpp'))
    if len(options) < 5:
        failed.append(f'only {len(options)} *_options.hpp headers: the light-header rule has nothing to hold')
    plants.append(('src/hybrid3d/models/model_options.hpp', '#include "hybrid3d/models/network.hpp"\n',
                   'an options header must stay light'))
    plants.append(('apps/hybrid3d/command_line.hpp', '#include "hybrid3d/train/trainer.hpp"\n',
                   'the command-line parser reaches <mpi.h>'))
    for path, line, expect in plants:
        planted = dict(files)
        planted[path] = line + files[path]
        found = [p for p in check(planted, layers) if expect in p]
        print(f'self-test: {line.strip()!r} in {path}: {"reported" if found else "NOT REPORTED"}')
        if not found:
            failed.append(path)
    cyclic = json.loads(json.dumps(layers))
    cyclic['core']['private_depends'] = cyclic['core']['private_depends'] + ['train']
    found = [p for p in cycles(cyclic) if p.startswith('cycle')]
    print(f'self-test: core -> train arrow: {"reported" if found else "NOT REPORTED"}')
    if not found:
        failed.append('cycle')
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--root', required=True)
    ap.add_argument('--layers', required=True)
    ap.add_argument('--self-test', action='store_true')
    ap.add_argument('--graph', action='store_true', help='print the layers and their arrows')
    a = ap.parse_args()
    with open(a.layers) as f:
        layers = json.load(f)
    files = read_tree(a.root)
    if len(files) < 50 or len(layers) < 8:
        sys.exit(f'found {len(files)} sources and {len(layers)} layers under {a.root}: not the hybrid3d tree')
    if a.graph:
        for name, info in layers.items():
            n = sum(1 for p in files if layer_of(p, layers) == name)
            lines = sum(files[p].count('\n') for p in files if layer_of(p, layers) == name)
            priv = info['private_depends']
            print(f'{name:13s} {n:3d} files {lines:6d} lines -> {", ".join(info["depends"]) or "-"}'
                  + (f' (private: {", ".join(priv)})' if priv else ''))
    problems = check(files, layers)
    for p in problems:
        print('layering:', p)
    print(f'{len(files)} files in {len(layers)} layers: {len(problems)} problem(s)')
    failed = self_test(files, layers) if a.self_test else []
    if failed:
        print('self-test FAILED: planted violations not reported in', failed)
    sys.exit(1 if problems or failed else 0)


if __name__ == '__main__':
    main()
