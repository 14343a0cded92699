"""An environment.yml (xarray's) installed without conda: conda names mapped to PyPI ones, the names PyPI does not
publish left out (and named: swebench_eval.conda_only), the C library conda ships with a package whose PyPI build
lacks it installed from Debian (cfgrib: ecCodes), and the pure-Python dependencies PyPI has only as source allowed,
without which pip refuses scitools-iris (cf-units needs antlr4-python3-runtime 4.7.2), zarr (asciitree) and pydap
(docopt) under the wheels-only rule."""

from __future__ import annotations

import pytest
from pinpoint.environments import paths
from pinpoint.swebench_eval.datasets import load_instances
from pinpoint.swebench_eval.scripts import env_script
from pinpoint.swebench_eval.sources import RepoSources
from pinpoint.swebench_eval.specs import conda_only_packages, env_inputs, spec_for

XARRAY = "pydata__xarray-6992"


def _inputs():
    instance = load_instances(ids=[XARRAY])[0]
    return instance, env_inputs(instance, spec_for(instance), RepoSources(paths.repos_dir()))


def test_conda_only_names_are_left_out_and_named_and_the_rest_mapped_to_pypi():
    instance, inputs = _inputs()
    names = inputs.packages.split()
    assert conda_only_packages(instance, RepoSources(paths.repos_dir())) == ["cdms2", "hdf5"]
    assert "cdms2" not in names and "hdf5" not in names
    assert "scitools-iris" in names and "iris" not in names and {"zarr", "pydap"} <= set(names)
    assert conda_only_packages(load_instances(ids=["pallets__flask-5014"])[0], RepoSources(paths.repos_dir())) == []


def test_each_name_is_installed_as_wheels_but_the_source_only_pure_python_dependencies():
    _, inputs = _inputs()
    script = env_script(inputs)
    assert ("pip install --only-binary :all: --no-binary antlr4-python3-runtime,asciitree,docopt "
            '-c /tmp/constraints.txt "$pkg"') in script


def test_a_conda_package_with_a_c_library_gets_it_from_debian_before_pip_installs_it():
    """cfgrib's PyPI wheel needs ecCodes, which conda ships beside it: apt installs Debian's before the names'
    loop installs cfgrib; an env without such a package runs no apt at all."""
    _, inputs = _inputs()
    assert inputs.apt_packages == ("libeccodes0",) and "cfgrib" in inputs.packages.split()
    lines = env_script(inputs).splitlines()
    apt = next(i for i, line in enumerate(lines) if "apt-get install" in line)
    assert "libeccodes0" in lines[apt] and "rm -rf /var/lib/apt/lists/*" in lines[apt]
    assert apt < next(i for i, line in enumerate(lines) if line.startswith("for pkg in ") and "cfgrib" in line)
    flask = load_instances(ids=["pallets__flask-5014"])[0]
    plain = env_inputs(flask, spec_for(flask), RepoSources(paths.repos_dir()))
    assert plain.apt_packages == () and "apt-get" not in env_script(plain)


@pytest.mark.docker
@pytest.mark.slow
def test_the_env_image_imports_what_the_conda_env_had_and_pypi_provides():
    """iris (with cf-units and its bundled udunits2), zarr, pydap and cfgrib (on Debian's ecCodes) import in the
    row's image; cdms2 does not."""
    from pinpoint.swebench_eval.images import build_instance_image
    from pinpoint.swebench_eval.runtime import instance_runtime

    instance, _ = _inputs()
    tag = build_instance_image(instance).tag
    with instance_runtime(instance, tag) as box:
        imported = box.run("python -c 'import iris, cf_units, zarr, pydap; print(cf_units.Unit(\"m\").convert(1, \"cm\"))'")
        assert imported.output.strip().endswith("100.0"), imported.output
        assert "No module named 'cdms2'" in box.run("python -c 'import cdms2'").output
        grib = box.run("python -c 'import cfgrib, eccodes; print(\"ecCodes\", eccodes.codes_get_api_version())'")
        assert grib.exit_code == 0 and "ecCodes 2." in grib.output, grib.output
