"""A registered name is one ``--set`` can select (Trust V, part 5): a channel registered as
``odd:name=1,x`` or ``<b>x</b> y`` could never be chosen on the command line, so it is refused."""

import pytest

from jaxfed.oac import channel
from jaxfed.registry import Registry


@pytest.mark.parametrize("name", ["", "odd:name=1,x", "<b>x</b> y", "a b", "-lead", "x" * 65, 3, None])
def test_a_name_set_cannot_select_is_refused_in_one_line(name):
    with pytest.raises(ValueError, match="name must be 1 to 64 letters, digits") as err:
        Registry("thing").register(name, 1)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["rician-fading", "combining-2", "my_channel.v2", "X" * 64])
def test_names_like_the_built_ins_are_taken(name):
    things = Registry("thing")
    assert things.register(name, 1) == 1 and things.names() == (name,)


def test_a_user_channel_with_an_odd_name_is_refused_by_the_channel_registry():
    with pytest.raises(ValueError, match="got 'odd:name=1,x'"):
        channel.register("odd:name=1,x", lambda *a: None, variance=None)
    assert "odd:name=1,x" not in channel.names()
